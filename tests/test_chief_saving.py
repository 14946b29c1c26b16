"""Only models built under our multi-worker strategy get chief-aware saving."""

import keras
import tensorflow as tf

from tfdist_opt.strategy.saving import chief_saving


def _model():
    return keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])


def test_plain_tf_distribute_strategy_model_is_not_swapped():
    with tf.distribute.MirroredStrategy(["/cpu:0"]).scope():
        model = _model()
    assert type(model) is keras.Sequential
    assert chief_saving.adopt_models(tf.distribute.get_strategy()) == 0
    assert type(model) is keras.Sequential


def test_saving_class_is_cached_and_keeps_names():
    sub = chief_saving.saving_class(keras.Sequential)
    assert sub is chief_saving.saving_class(keras.Sequential)
    assert chief_saving.saving_class(sub) is sub
    assert (sub.__name__, sub.__module__) == ("Sequential", keras.Sequential.__module__)
    assert issubclass(sub, keras.Sequential)


# ---------------------------------------------- Keras's file-writing callbacks
import json
import os
import tempfile
import types

import numpy as np
import pytest

from tfdist_opt.strategy.saving import chief_callbacks


class _Strategy(types.SimpleNamespace):
    """A stand-in strategy; weakly referenceable and hashed by identity, as a
    real one is (tfdist_opt keeps its state in `runtime.runtime_of`)."""

    __hash__ = object.__hash__
    __eq__ = object.__eq__


def _fake_strategy(task_id):
    """What `is_chief` reads: a 2-worker cluster, this task `worker:task_id`."""
    spec = tf.train.ClusterSpec({"worker": ["localhost:1", "localhost:2"]})
    return _Strategy(
        cluster_resolver=types.SimpleNamespace(
            task_type="worker", task_id=task_id, cluster_spec=lambda: spec
        )
    )


def _fitted(task_id):
    model = _model()
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    model.optimizer.build(model.trainable_variables)
    model._distribute_strategy = _fake_strategy(task_id)
    return model


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    d = tmp_path / "private_tmp"
    d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    return d


def test_adopt_swaps_each_file_writing_callback_once(tmp_path):
    cbs = [
        keras.callbacks.ModelCheckpoint(str(tmp_path / "c.keras")),
        keras.callbacks.BackupAndRestore(str(tmp_path / "b")),
        keras.callbacks.CSVLogger(str(tmp_path / "l.csv")),
        keras.callbacks.EarlyStopping(),
    ]
    assert chief_callbacks.adopt(cbs) == 3
    assert chief_callbacks.adopt(keras.callbacks.CallbackList(cbs)) == 0
    assert chief_callbacks.adopt(None) == 0
    assert [type(c).__name__ for c in cbs] == [
        "ModelCheckpoint",
        "BackupAndRestore",
        "CSVLogger",
        "EarlyStopping",
    ]
    assert isinstance(cbs[0], chief_callbacks.ChiefModelCheckpoint)
    assert type(cbs[3]) is keras.callbacks.EarlyStopping


def test_non_chief_model_checkpoint_and_csv_leave_shared_dir_alone(tmp_path, private_tmp):
    model = _fitted(task_id=1)
    ckpt = keras.callbacks.ModelCheckpoint(str(tmp_path / "ckpts" / "ep{epoch}.keras"))
    csv = keras.callbacks.CSVLogger(str(tmp_path / "log.csv"))
    chief_callbacks.adopt([ckpt, csv])
    for cb in (ckpt, csv):
        cb.set_model(model)
    csv.on_train_begin()
    csv.on_epoch_end(0, {"loss": 1.0})
    ckpt._save_model(epoch=0, batch=None, logs={"loss": 1.0})
    csv.on_train_end()
    assert os.listdir(tmp_path) == ["private_tmp"]
    assert os.listdir(private_tmp) == []
    assert ckpt.filepath == str(tmp_path / "ckpts" / "ep{epoch}.keras")


def test_chief_model_checkpoint_writes_the_real_path(tmp_path):
    model = _fitted(task_id=0)
    ckpt = keras.callbacks.ModelCheckpoint(str(tmp_path / "ckpts" / "ep{epoch}.keras"))
    chief_callbacks.adopt([ckpt])
    ckpt.set_model(model)
    ckpt._save_model(epoch=0, batch=None, logs={"loss": 1.0})
    assert os.listdir(tmp_path / "ckpts") == ["ep1.keras"]


def test_non_chief_backup_restores_read_only_and_never_writes(tmp_path):
    backup = tmp_path / "backup"
    chief_model = _fitted(task_id=0)
    for v in chief_model.weights:
        v.assign(np.full(v.shape, 0.5, "float32"))
    chief_cb = keras.callbacks.BackupAndRestore(str(backup))
    chief_cb.set_model(chief_model)
    chief_cb.on_epoch_end(2)  # plain Keras: writes epoch 3's backup
    before = {p: os.stat(backup / p).st_mtime_ns for p in os.listdir(backup)}

    model = _fitted(task_id=1)
    cb = keras.callbacks.BackupAndRestore(str(backup))
    chief_callbacks.adopt([cb])
    cb.set_model(model)
    cb.on_train_begin()
    assert model._initial_epoch == 3
    for v in model.weights:
        np.testing.assert_array_equal(v.numpy(), 0.5)
    cb.on_epoch_end(3)
    cb.on_train_end()
    assert {p: os.stat(backup / p).st_mtime_ns for p in os.listdir(backup)} == before


def test_non_chief_backup_falls_back_to_bkp_without_touching_files(tmp_path):
    backup = tmp_path / "backup"
    chief_model = _fitted(task_id=0)
    chief_cb = keras.callbacks.BackupAndRestore(str(backup), double_checkpoint=True)
    chief_cb.set_model(chief_model)
    chief_cb.on_epoch_end(0)
    chief_cb.on_epoch_end(1)  # latest = epoch 2, .bkp = epoch 1
    (backup / "latest.weights.h5").write_bytes(b"torn write")
    model = _fitted(task_id=1)
    cb = keras.callbacks.BackupAndRestore(str(backup), double_checkpoint=True)
    chief_callbacks.adopt([cb])
    cb.set_model(model)
    cb.on_train_begin()
    assert model._initial_epoch == 1
    assert (backup / "latest.weights.h5").read_bytes() == b"torn write"
    assert json.loads((backup / "training_metadata.json").read_text())["epoch"] == 2


def test_non_chief_keras_tensorboard_writes_nothing(tmp_path):
    model = _fitted(task_id=1)
    tb = keras.callbacks.TensorBoard(str(tmp_path / "tb"))
    chief_callbacks.adopt([tb])
    tb.set_model(model)
    tb.on_train_begin()
    tb.on_epoch_end(0, {"loss": 1.0})
    tb.on_train_end()
    assert not (tmp_path / "tb").exists()
    assert type(tb).__name__ == "TensorBoard"


def test_chief_tensorboard_of_ours_is_left_alone(tmp_path):
    from tfdist_opt.callbacks.summaries import ChiefTensorBoard

    tb = ChiefTensorBoard(str(tmp_path / "tb"))
    assert chief_callbacks.adopt([tb]) == 0
    assert type(tb) is ChiefTensorBoard


def test_non_chief_on_its_own_storage_writes_every_route(tmp_path, private_tmp):
    """storage_sharing='per_worker' (what the probe finds on a per-host disk):
    worker 1 keeps its own copy of each file (issue 23)."""
    from tfdist_opt.strategy.saving import file_writers

    model = _fitted(task_id=1)
    file_writers.attach(model._distribute_strategy, "per_worker")
    ckpt = keras.callbacks.ModelCheckpoint(str(tmp_path / "ckpts" / "ep{epoch}.keras"))
    csv = keras.callbacks.CSVLogger(str(tmp_path / "log.csv"))
    tb = keras.callbacks.TensorBoard(str(tmp_path / "tb"))
    chief_callbacks.adopt([ckpt, csv, tb])
    for cb in (ckpt, csv, tb):
        cb.set_model(model)
    csv.on_train_begin()
    csv.on_epoch_end(0, {"loss": 1.0})
    ckpt._save_model(epoch=0, batch=None, logs={"loss": 1.0})
    csv.on_train_end()
    tb.on_train_begin()
    tb.on_train_end()
    assert sorted(os.listdir(tmp_path)) == ["ckpts", "log.csv", "private_tmp", "tb"]
    assert os.listdir(tmp_path / "ckpts") == ["ep1.keras"]
    model.__class__ = chief_saving.saving_class(type(model))
    model.save_weights(str(tmp_path / "m.weights.h5"))
    assert (tmp_path / "m.weights.h5").exists()
    assert os.listdir(private_tmp) == []
