"""shard_optimizer_state on 2 real workers (RING over 127.0.0.1).

One cluster launch (scripts/zero_train.py) trains Adam and SGD+momentum
sharded and unsharded on the same strategy: the sharded weights equal the
unsharded ones (rel 1e-6) on both workers, the slots per replica take about
half the bytes, and a checkpoint written by the sharded 2-worker run resumes
in one unsharded process to the 2-worker run's weights (rel 1e-6).
"""

import json
import os
import runpy

import numpy as np
import pytest

from tests.multiworker import harness

# Its processes run TensorFlow's graph optimizer, as users run (conftest.py).
pytestmark = pytest.mark.grappler

SCRIPT = os.path.join("tests", "multiworker", "scripts", "zero_train.py")


def _load(path):
    with np.load(path) as z:
        return [z[f"w{i}"] for i in range(len(z.files))]


def _max_rel(a, b):
    return max(float(np.abs(x - y).max() / (np.abs(y).max() + 1e-30)) for x, y in zip(a, b))


@pytest.mark.compat
@pytest.mark.multiworker
def test_sharded_state_on_two_workers(tmp_path):
    results = harness.run_workers(2, [SCRIPT, "--out", str(tmp_path)], timeout_s=240)
    for r in results:
        assert r.returncode == 0, f"worker {r.index}:\n{r.output[-4000:]}"
    for task in (0, 1):
        for opt in ("adam", "sgd"):
            sharded = _load(tmp_path / f"{opt}_sharded_{task}.npz")
            plain = _load(tmp_path / f"{opt}_plain_{task}.npz")
            assert _max_rel(sharded, plain) < 1e-6, (opt, task)
        sizes = json.loads((tmp_path / f"bytes_{task}.json").read_text())
        assert sizes["adam_sharded"] < 0.6 * sizes["adam_plain"]
    runpy.run_path(SCRIPT)["reference"](str(tmp_path))  # one process: this one
    assert (
        _max_rel(_load(tmp_path / "resumed_ref.npz"), _load(tmp_path / "adam_sharded_0.npz")) < 1e-6
    )
