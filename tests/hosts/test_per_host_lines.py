"""The guide "Several hosts by hand", run on two emulated hosts.

docs/guides/several-hosts.md tells a user to print the per-host lines with
`tfdist-opt launch --workers H:P,H:P -- python -m tfdist_opt.examples.train_cnn`
and run each on its host. Here each line runs in its own network namespace
(its own address, a 1 Gbit/s link): both workers train, and their weights
equal each other's (same hash) and those of the same job on one host's
loopback (`tfdist-opt launch -n 2`) within float32 rounding: each worker
alone on its host sizes TF's thread pools for one worker, so convolutions
sum in another order, and 32 momentum steps carry that to ~1e-5 absolute
(atol 5e-5; a wrong batch on one host moves weights by ~1e-2). The hosts
change nothing.

The reference is the two-worker job on one host, not one process: the main
job's input pipeline shards examples per worker (and shuffles within a
shard), so a one-process run sees other batches (its loss differs in the
third decimal).
"""

import pathlib
import re
import shlex
import subprocess
import sys

import numpy as np
import pytest

from tests.hosts import per_host
from tests.hosts import testbed as testbed_lib
from tests.multiworker import harness

pytestmark = [pytest.mark.multiworker, pytest.mark.slow]

GUIDE = pathlib.Path(testbed_lib.REPO_ROOT) / "docs" / "guides" / "several-hosts.md"
FAST = ["--epochs", "2", "--examples", "1024"]


def _guide_launch_line() -> list[str]:
    """The guide's `tfdist-opt launch --workers ...` command, as argv."""
    text = GUIDE.read_text()
    found = re.findall(r"^tfdist-opt launch --workers \S+ -- .+$", text, re.M)
    assert found, f"{GUIDE} shows no `tfdist-opt launch --workers` line"
    return shlex.split(found[0])


def _weights(path) -> list[np.ndarray]:
    with np.load(path) as f:
        return [f[k] for k in sorted(f.files, key=lambda k: int(k.split("_")[1]))]


def _loopback_reference(npz):
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "tfdist_opt",
            "launch",
            "-n",
            "2",
            "--",
            sys.executable,
            "-m",
            "tfdist_opt.examples.train_cnn",
            *FAST,
            "--weights_npz",
            str(npz),
        ],
        cwd=testbed_lib.REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env=per_host.host_env(),
    )


def test_guide_per_host_lines_train_on_two_hosts_like_one_host(testbed, tmp_path):
    argv = _guide_launch_line()
    options = argv[2 : argv.index("--")]
    command = argv[argv.index("--") + 1 :]
    assert options[1] == f"{testbed[0].address}:2222,{testbed[1].address}:2222"
    lines = per_host.launch_lines(
        *options, command=command + FAST + ["--weights_npz", str(tmp_path / "hosts.npz")]
    )
    assert [(t, i) for _, t, i, _ in lines] == [("worker", 0), ("worker", 1)]
    with harness.alongside(_loopback_reference, tmp_path / "one_host.npz") as reference:
        outputs = per_host.finish(testbed, per_host.start_lines(testbed, lines), 240)
    for rc, out in outputs:
        assert rc == 0, out[-4000:]
    results = [per_host.results(out)[0] for _, out in outputs]
    assert [r["task"] for r in results] == ["worker:0", "worker:1"]
    assert {r["replicas"] for r in results} == {2}
    assert results[0]["loss"][-1] < results[0]["loss"][0]
    ref = reference.result()
    assert ref.returncode == 0, (ref.stdout + ref.stderr)[-4000:]
    assert len({r["weights_sha256"] for r in results}) == 1, results
    hosts, one_host = _weights(tmp_path / "hosts.npz"), _weights(tmp_path / "one_host.npz")
    assert [w.shape for w in hosts] == [w.shape for w in one_host]
    for got, want in zip(hosts, one_host):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=5e-5)
