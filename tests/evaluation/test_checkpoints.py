"""Which checkpoints are complete and new: every format's rule (pure, ms)."""

import pytest

from tests.evaluation._fakes import Clock, FakeDir
from tfdist_opt.evaluation import checkpoints


def _names(found):
    return [(f.name, f.format, f.step) for f in found]


def test_each_format_is_found_with_its_step_and_partial_ones_are_not():
    d = FakeDir()
    d.write("backup-30/state.index", 1, 10)  # ours, sealed
    d.write("backup-30/state.data-00000-of-00001", 9, 10)
    d.write("backup-30/manifest.json", 1, 11)
    d.write(".staging-40/state.index", 1, 12)  # ours, in progress
    d.write("backup-50/state.index", 1, 13)  # no manifest: not sealed
    d.write("ckpt-2.data-00000-of-00001", 9, 20)  # tf, index written last
    d.write("ckpt-2.index", 1, 21)
    d.write("ckpt-3.data-00000-of-00001", 9, 22)  # tf, index not yet there
    d.write("ckpt-4.index.tempstate123", 1, 23)  # tf temp name
    d.write("weights.07.weights.h5", 5, 30)  # keras ModelCheckpoint
    d.write("model.keras", 5, 31)
    d.write("latest.weights.h5", 5, 32)  # Keras BackupAndRestore
    d.write("training_metadata.json", 1, 33, text='{"epoch": 4, "batch": -1}')
    d.write("latest.weights.h5.bkp", 5, 34)
    d.write("notes.txt", 1, 35)
    found = checkpoints.scan(d.root, **d.calls())
    assert _names(found) == [
        ("backup-30", "backup", 30),
        ("ckpt-2", "tf", 2),
        ("weights.07.weights.h5", "keras", 7),
        ("model.keras", "keras", None),
        ("latest.weights.h5", "keras", 4),
    ]
    assert found[0].path == "/ckpt/backup-30/state"
    assert found[1].path == "/ckpt/ckpt-2"


def test_a_missing_directory_is_empty():
    assert checkpoints.scan("/nowhere/at/all") == []


def test_keras_files_are_read_only_after_settling_and_once_per_version():
    d, clock = FakeDir(), Clock()
    w = checkpoints.CheckpointWatcher(d.root, settle_s=2.0, clock=clock, **d.calls())
    d.write("w.weights.h5", 100, 1)
    assert w.poll() == []  # first sight
    clock.now = 1.0
    d.write("w.weights.h5", 200, 2)  # still growing: a new version
    assert w.poll() == []
    clock.now = 2.5  # 1.5 s stable: not yet
    assert w.poll() == []
    clock.now = 3.0  # 2 s stable: ready
    (item,) = w.poll()
    assert item.version == (200, 2) and w.unchanged(item)
    w.mark_done(item)
    clock.now = 10.0
    assert w.poll() == []  # never twice
    d.write("w.weights.h5", 200, 3)  # rewritten in place (next epoch)
    assert not w.unchanged(item)
    assert w.poll() == []
    clock.now = 12.0
    assert [f.version for f in w.poll()] == [(200, 3)]


def test_after_training_ended_keras_files_need_no_settling():
    d, clock = FakeDir(), Clock()
    w = checkpoints.CheckpointWatcher(d.root, settle_s=60.0, clock=clock, **d.calls())
    d.write("final.weights.h5", 100, 1)
    assert w.poll() == []
    assert _names(w.poll(final=True)) == [("final.weights.h5", "keras", None)]


def test_sealed_formats_are_ready_at_once_and_ordered_oldest_first():
    d, clock = FakeDir(), Clock()
    w = checkpoints.CheckpointWatcher(d.root, settle_s=60.0, clock=clock, **d.calls())
    d.write("ckpt-2.data-00000-of-00001", 9, 5)
    d.write("ckpt-2.index", 1, 6)
    d.write("ckpt-1.data-00000-of-00001", 9, 1)
    d.write("ckpt-1.index", 1, 2)
    assert [f.name for f in w.poll()] == ["ckpt-1", "ckpt-2"]


def test_a_pruned_backup_is_no_longer_unchanged():
    d = FakeDir()
    d.write("backup-1/manifest.json", 1, 1)
    d.write("backup-1/state.index", 1, 1)
    w = checkpoints.CheckpointWatcher(d.root, settle_s=0, **d.calls())
    (item,) = w.poll()
    assert w.unchanged(item)
    d.remove("backup-1/manifest.json")
    d.remove("backup-1/state.index")
    assert not w.unchanged(item)


def test_bad_settle_is_refused_naming_it():
    with pytest.raises(ValueError, match=r"`settle_s`.*Received: settle_s=-1"):
        checkpoints.CheckpointWatcher("/x", settle_s=-1)
