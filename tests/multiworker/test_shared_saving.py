"""Keras's own saving from every worker on one shared directory (issue 17)."""

import json
import os

import numpy as np
import pytest

from tests.multiworker import harness

SCRIPT = "tests/multiworker/scripts/shared_save.py"


@pytest.mark.multiworker
@pytest.mark.slow
def test_every_worker_saves_to_shared_dir_only_chief_writes(tmp_path):
    shared, tmp = tmp_path / "shared", tmp_path / "tmp"
    shared.mkdir()
    tmp.mkdir()
    results = harness.run_workers(2, [SCRIPT, str(shared)], timeout_s=150,
                                  extra_env={"TMPDIR": str(tmp)})
    got = {}
    for r in results:
        assert r.returncode == 0, r.output[-3000:]
        line = [l for l in r.output.splitlines() if l.startswith("RESULT ")][-1]
        res = json.loads(line[len("RESULT "):])
        got[res["chief"]] = res
        assert res["class"].endswith(":True")
        assert "tfdist_opt.DistributedBackupAndRestore" in res["refused"]
    assert sorted(os.listdir(shared)) == ["ckpt.keras", "m.keras", "m.weights.h5"]
    assert os.listdir(tmp) == []          # the non-chief's temp saves are gone
    import keras
    chief_w = np.array(got[True]["w"])
    np.testing.assert_allclose(got[False]["w"], chief_w, rtol=1e-6)
    loaded = keras.saving.load_model(shared / "m.keras")
    assert type(loaded).__name__ == "Sequential"
    np.testing.assert_allclose(
        np.concatenate([v.numpy().ravel() for v in loaded.weights]), chief_w, rtol=1e-6)
    loaded.load_weights(shared / "m.weights.h5")
    np.testing.assert_allclose(
        np.concatenate([v.numpy().ravel() for v in loaded.weights]), chief_w, rtol=1e-6)
