"""DistributedBackupAndRestore on 2 virtual replicas."""

import os
import tempfile

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfdist_opt.callbacks import DistributedBackupAndRestore
from tfdist_opt.callbacks import backup as backup_lib
from tests.callbacks._models import dataset, model


class CrashAt(keras.callbacks.Callback):
    """Raises (like a kill: no on_train_end) after optimizer step `step`."""

    def __init__(self, step):
        super().__init__()
        self.step = step

    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) == self.step:
            raise KeyboardInterrupt


def _weights_equal(a, b):
    return all(np.array_equal(x, y) for x, y in zip(a.get_weights(), b.get_weights()))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(backup_dir=""), "backup_dir=''"),
        (dict(backup_dir="d", save_freq=0), "save_freq=0"),
        (dict(backup_dir="d", save_freq="batch"), "save_freq='batch'"),
    ],
)
def test_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DistributedBackupAndRestore(**kwargs)


@pytest.mark.compat
def test_mid_epoch_resume_equals_uninterrupted(strategy, tmp_path):
    ref = model(strategy)
    ref.fit(dataset(), epochs=3, verbose=0)
    bdir = str(tmp_path / "b")
    with pytest.raises(KeyboardInterrupt):
        model(strategy).fit(
            dataset(),
            epochs=3,
            verbose=0,
            callbacks=[DistributedBackupAndRestore(bdir, save_freq=2), CrashAt(11)],
        )
    meta = backup_lib.read_latest(bdir)
    assert (meta["epoch"], meta["calls"], meta["step"]) == (1, 2, 10)  # mid-epoch
    cb = DistributedBackupAndRestore(bdir, save_freq=2)
    resumed = model(strategy)
    hist = resumed.fit(dataset(), epochs=3, verbose=0, callbacks=[cb])
    assert cb.restored["step"] == 10
    assert len(hist.history["loss"]) == 2  # epochs 1 and 2 ran
    assert int(resumed.optimizer.iterations.numpy()) == 24
    assert _weights_equal(ref, resumed)  # bit-identical
    assert os.listdir(bdir) == []  # finished: deleted


def test_nan_never_deletes_last_good_backup(strategy, tmp_path):
    x = np.random.RandomState(0).rand(64, 4).astype("float32")
    x[40:48] = np.nan  # batch 5 -> step 6
    ds = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(8)
    bdir = str(tmp_path / "b")
    m = model(strategy)
    m.fit(
        ds,
        epochs=2,
        verbose=0,
        callbacks=[
            DistributedBackupAndRestore(bdir, save_freq=1),
            keras.callbacks.TerminateOnNaN(),
        ],
    )
    meta = backup_lib.read_latest(bdir)
    assert meta is not None and meta["step"] == 5  # last finite step kept
    ref = model(strategy)
    ref.fit(ds.take(5), epochs=1, verbose=0)
    restored = model(strategy)
    restored.fit(
        ds.take(5),
        epochs=1,
        verbose=0,
        callbacks=[  # all 5 skipped
            DistributedBackupAndRestore(bdir, delete_on_end=False)
        ],
    )
    assert all(np.isfinite(w).all() for w in restored.get_weights())
    assert _weights_equal(ref, restored)


def test_kill_during_save_leaves_previous_backup_loadable(strategy, tmp_path):
    bdir = str(tmp_path / "b")
    cb = DistributedBackupAndRestore(bdir, save_freq=2)

    def die_on_second(meta):
        if meta["step"] == 4:
            raise KeyboardInterrupt  # after writing, before the commit

    cb._after_write = die_on_second
    with pytest.raises(KeyboardInterrupt):
        model(strategy).fit(dataset(), epochs=1, verbose=0, callbacks=[cb])
    assert backup_lib.read_latest(bdir)["step"] == 2
    assert sorted(os.listdir(bdir)) == [".staging-4", "backup-2", "latest.json"]
    cb2 = DistributedBackupAndRestore(bdir, save_freq=2, delete_on_end=False)
    model(strategy).fit(dataset(), epochs=1, verbose=0, callbacks=[cb2])
    assert cb2.restored["step"] == 2
    assert sorted(os.listdir(bdir)) == [
        "backup-6",
        "backup-8",
        "latest.json",
    ]  # keep=2; staging gone


def test_non_chief_writes_only_temp_dirs_and_removes_them(strategy, tmp_path, monkeypatch):
    from tfdist_opt.strategy.saving import file_writers

    # Another worker of the group writes backup_dir (tfdist_opt.strategy.saving.file_writers).
    monkeypatch.setattr(file_writers, "is_writer", lambda strategy, directory: False)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    made = []
    real_mkdtemp = tempfile.mkdtemp
    monkeypatch.setattr(
        tempfile, "mkdtemp", lambda **kw: made.append(real_mkdtemp(**kw)) or made[-1]
    )
    bdir = tmp_path / "b"
    model(strategy).fit(
        dataset(),
        epochs=1,
        verbose=0,
        callbacks=[DistributedBackupAndRestore(str(bdir), save_freq=2)],
    )
    assert len(made) == 5  # 4 batch saves + epoch end
    assert all(os.path.basename(p).startswith("tfdist_opt_backup_local_") for p in made)
    assert not bdir.exists()  # real dir untouched
    assert [p for p in tmp.iterdir() if p.name.startswith("tfdist_opt_backup")] == []


def test_cannot_combine_with_keras_backup(strategy, tmp_path):
    with pytest.raises(ValueError, match="cannot be used together"):
        model(strategy).fit(
            dataset(16),
            epochs=1,
            verbose=0,
            callbacks=[
                DistributedBackupAndRestore(str(tmp_path / "a")),
                keras.callbacks.BackupAndRestore(str(tmp_path / "b")),
            ],
        )


def test_leftover_sweep_keeps_another_live_jobs_temp_dirs(tmp_path, monkeypatch):
    # Two jobs on one host share the temp directory and their tasks' names
    # (worker 1 of each): a non-writer's start-up sweep removes the dirs of
    # killed saves only, never a live process's save in progress.
    import subprocess
    import sys

    from tfdist_opt.callbacks import _common, backup_io

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    prefix = f"tfdist_opt_backup_{_common.task_tag()}_"
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(timeout=60)
    try:
        live_dir = tmp_path / f"{prefix}{other.pid}_abc"
        dead_dir = tmp_path / f"{prefix}{dead.pid}_abc"
        old_dir = tmp_path / f"{prefix}x1y2z3"  # named before process ids were
        for d in (live_dir, dead_dir, old_dir):
            d.mkdir()
        backup_io.prepare_dirs(str(tmp_path / "backups"), writes=False)
        assert live_dir.exists()
        assert not dead_dir.exists() and not old_dir.exists()
    finally:
        other.kill()
        other.wait(timeout=60)
