"""Pipeline x data parallelism: 2 real workers x 2 virtual CPUs vs one process.

Each worker runs the 2-stage pipeline over its own CPU:0/CPU:1 on its half
of every global batch (scripts/mp_train.py); gradients are averaged across
workers on the stage devices. The weights equal one process training the
same pipeline on the whole batches, within 1e-5, and worker 1, which
starts from other weights, ends identical to worker 0 (chief's broadcast).
"""

import json
import os

import numpy as np
import pytest

from tests.multiworker import harness

SCRIPT = os.path.join("tests", "multiworker", "scripts", "mp_train.py")


def _load(path):
    with np.load(path) as z:
        return [z[f"w{i}"] for i in range(len(z.files) - 1)], int(z["iterations"])


@pytest.mark.multiworker
@pytest.mark.slow
def test_pipeline_on_two_workers_equals_one_process(tmp_path):
    with harness.alongside(
        harness.run_single, [SCRIPT, "--out", str(tmp_path), "--reference"]
    ) as run:
        results = harness.run_workers(2, [SCRIPT, "--out", str(tmp_path)], timeout_s=240)
    for r in results:
        assert r.returncode == 0, f"worker {r.index}:\n{r.output[-4000:]}"
    ref = run.result()
    assert ref.returncode == 0, ref.output[-4000:]
    for r in results:
        line = next(ln for ln in r.output.splitlines() if ln.startswith("DEVICES="))
        devices = json.loads(line[len("DEVICES=") :])
        assert [d.rsplit(":", 1)[1] for d in devices] == ["0", "0", "1", "1", "1", "1"]
        assert all(f"/job:worker/replica:0/task:{r.index}/" in d for d in devices)
    single, steps = _load(tmp_path / "ref.npz")
    w0, it0 = _load(tmp_path / "0.npz")
    w1, it1 = _load(tmp_path / "1.npz")
    assert it0 == it1 == steps == 4
    for a, b, s in zip(w0, w1, single):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, s, atol=1e-5, rtol=0)
