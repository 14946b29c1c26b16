"""Parameter servers across two emulated hosts, plain `model.fit`.

The per-host lines of `tfdist-opt launch --workers H0:2222,H1:2222 --ps
H0:2223` (docs/guides/several-hosts.md): the chief and the ps task on host
0, the worker on host 1, so every step's variable reads and updates cross
the 1 Gbit/s link. The chief's `fit` runs exactly epochs x steps_per_epoch
iterations, and the kernel equals the one-process run's and the analytic
`-k * lr * g` (scripts/ps_fit.py) to float32 rounding.
"""

import subprocess
import sys

import numpy as np
import pytest

from tests.hosts import per_host
from tests.multiworker import harness

pytestmark = [pytest.mark.multiworker, pytest.mark.slow]

SCRIPT = "tests/hosts/scripts/ps_fit.py"


def _one_process():
    return subprocess.run(
        [sys.executable, SCRIPT],
        capture_output=True,
        text=True,
        timeout=240,
        env=per_host.host_env(),
        cwd=harness.REPO_ROOT,
    )


def test_chief_and_ps_on_one_host_worker_on_another_fit_exactly(testbed):
    h0, h1 = testbed[0].address, testbed[1].address
    lines = per_host.launch_lines(
        "--workers", f"{h0}:2222,{h1}:2222", "--ps", f"{h0}:2223", command=["python", SCRIPT]
    )
    assert [(a, t, i) for a, t, i, _ in lines] == [
        (f"{h0}:2222", "chief", 0),
        (f"{h1}:2222", "worker", 0),
        (f"{h0}:2223", "ps", 0),
    ]
    with harness.alongside(_one_process) as reference:
        outputs = per_host.finish(testbed, per_host.start_lines(testbed, lines), 240)
    for (_, task, index, _), (rc, out) in zip(lines, outputs):
        assert rc == 0, f"{task} {index}:\n{out[-4000:]}"
    [result] = per_host.results(outputs[0][1])
    assert not per_host.results(outputs[1][1]) and not per_host.results(outputs[2][1])
    assert result["strategy"] == "KerasParameterServerStrategy"
    assert result["iterations"] == 15
    ref = reference.result()
    assert ref.returncode == 0, (ref.stdout + ref.stderr)[-4000:]
    [one] = per_host.results(ref.stdout)
    assert one["iterations"] == 15
    expected = np.array(result["expected"])
    assert np.abs(expected).max() > 0.01  # large against the tolerance
    np.testing.assert_allclose(result["kernel"], one["kernel"], rtol=0, atol=2e-5)
    np.testing.assert_allclose(result["kernel"], expected, rtol=0, atol=2e-5)
