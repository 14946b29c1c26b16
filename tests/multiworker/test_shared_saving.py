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
    results = harness.run_workers(
        2, [SCRIPT, str(shared)], timeout_s=150, extra_env={"TMPDIR": str(tmp)}
    )
    got = {}
    for r in results:
        assert r.returncode == 0, r.output[-3000:]
        line = [l for l in r.output.splitlines() if l.startswith("RESULT ")][-1]
        res = json.loads(line[len("RESULT ") :])
        got[res["chief"]] = res
        assert res["class"].endswith(":True")
    assert sorted(os.listdir(shared)) == ["ckpt.keras", "export", "m.keras", "m.weights.h5"]
    assert "saved_model.pb" in os.listdir(shared / "export")
    # The writer, named: the chief saved nothing elsewhere; every save of the
    # non-chief (2 checkpoints, save, save_weights, export) went into its own
    # temporary directory under TMPDIR, since removed.
    assert got[True]["scratch"] == []
    scratch = got[False]["scratch"]
    assert [sorted(e["files"]) for e in scratch] == [
        ["ckpt/ckpt.keras"],
        ["ckpt/ckpt.keras"],
        ["m.keras"],
        ["m.weights.h5"],
        [
            "export/fingerprint.pb",
            "export/saved_model.pb",
            "export/variables/variables.data-00000-of-00001",
            "export/variables/variables.index",
        ],
    ]
    assert all(os.path.dirname(e["dir"]) == str(tmp) for e in scratch)
    assert os.listdir(tmp) == []  # the non-chief's temp saves are gone
    import keras

    chief_w = np.array(got[True]["w"])
    np.testing.assert_allclose(got[False]["w"], chief_w, rtol=1e-6)
    loaded = keras.saving.load_model(shared / "m.keras")
    assert type(loaded).__name__ == "Sequential"
    np.testing.assert_allclose(
        np.concatenate([v.numpy().ravel() for v in loaded.weights]), chief_w, rtol=1e-6
    )
    loaded.load_weights(shared / "m.weights.h5")
    np.testing.assert_allclose(
        np.concatenate([v.numpy().ravel() for v in loaded.weights]), chief_w, rtol=1e-6
    )
    # Reloaded inside the scope: trains as one model (each worker fed other data).
    np.testing.assert_allclose(got[False]["inside_w"], got[True]["inside_w"], rtol=1e-6)
    assert not np.allclose(got[True]["inside_w"], chief_w)
    np.testing.assert_allclose(got[False]["inside_predict"], got[True]["inside_predict"], rtol=1e-6)
    # Reloaded outside: Keras gives it the default strategy, the workers diverge
    # (docs/guides/multi-worker.md, "What is different": load inside `with strategy.scope():`).
    assert got[True]["outside_strategy"] == "_DefaultDistributionStrategy"
    assert not np.allclose(got[False]["outside_w"], got[True]["outside_w"])


CALLBACKS_SCRIPT = "tests/multiworker/scripts/keras_callbacks_shared.py"


def _results(results, expect_rc):
    got = {}
    for r in results:
        assert r.returncode == expect_rc, r.output[-3000:]
        if expect_rc == 0:
            line = [l for l in r.output.splitlines() if l.startswith("RESULT ")][-1]
            res = json.loads(line[len("RESULT ") :])
            got[res["chief"]] = res
    return got


@pytest.mark.multiworker
@pytest.mark.slow
def test_keras_callbacks_on_shared_dir_and_backup_restart_resumes(tmp_path):
    """ModelCheckpoint, BackupAndRestore and CSVLogger unchanged on 2 workers
    sharing one directory: a crash after epoch 2 and a restart resume at
    epoch 2 from Keras's BackupAndRestore and end at the uninterrupted math."""
    shared, tmp = tmp_path / "shared", tmp_path / "tmp"
    shared.mkdir()
    tmp.mkdir()
    argv = [CALLBACKS_SCRIPT, str(shared)]
    env = {"TMPDIR": str(tmp)}
    _results(harness.run_workers(2, argv + ["crash"], timeout_s=150, extra_env=env), 3)
    assert sorted(os.listdir(shared / "backup")) == ["latest.weights.h5", "training_metadata.json"]
    meta = json.loads((shared / "backup" / "training_metadata.json").read_text())
    assert meta["epoch"] == 2
    assert sorted(os.listdir(shared / "ckpts")) == ["ep1.keras", "ep2.keras"]

    # The restart (one cluster for both steps): first with a backup_dir per
    # host (worker 0's holds the backup, worker 1's is empty): both refuse
    # before step 1, naming each worker's epoch and directory; then on the
    # shared directory, where both resume.
    import shutil

    shutil.copytree(shared, tmp_path / "own0")
    (tmp_path / "own1").mkdir()
    restart = harness.run_workers(
        2, argv + ["refuse_then_resume", str(tmp_path / "own{task}")], timeout_s=150, extra_env=env
    )
    for r in restart:
        refused = [l for l in r.output.splitlines() if l.startswith("REFUSED ")]
        assert len(refused) == 1, r.output[-3000:]
        assert refused[0].startswith("REFUSED RestoreMismatchError: "), refused
        assert "workers restored different states" in refused[0]
        assert "at step 2 (epoch 2 in" in refused[0] and "no backup in" in refused[0]
    assert (tmp_path / "own0" / "backup" / "latest.weights.h5").exists()

    got = _results(restart, 0)
    expected = harness.sgd_reference(epochs=4)
    for res in got.values():
        assert res["start_epoch"] == 2  # resumed from Keras's backup
        assert res["classes"][:3] == ["BackupAndRestore", "ModelCheckpoint", "CSVLogger"]
        np.testing.assert_allclose(res["w"], expected, rtol=1e-5, atol=1e-6)
    assert not (shared / "backup").exists()  # delete_checkpoint: the chief removed it
    assert sorted(os.listdir(shared / "ckpts")) == [f"ep{i}.keras" for i in range(1, 5)]
    rows = (shared / "log.csv").read_text().splitlines()
    assert rows[0].startswith("epoch") and [r.split(",")[0] for r in rows[1:]] == [
        "0",
        "1",
        "2",
        "3",
    ]  # one writer: no doubled rows
    assert os.listdir(tmp) == []  # non-chief temp copies are gone
