"""`SidecarEvaluator` on every checkpoint format, in one process (fake clock).

Each format the chief can write is produced by a real `fit` (our
`DistributedBackupAndRestore`, Keras's `BackupAndRestore` and
`ModelCheckpoint`, `tf.train.CheckpointManager`), then evaluated into a
freshly initialised model: the last evaluation equals `model.evaluate` of
the trained model, and the first equals `evaluate` of the first
checkpoint's model. A truncated `.weights.h5` is skipped, and its completed
version is evaluated.
"""

import os
import keras
import numpy as np
import pytest
import tensorflow as tf

import tfdist_opt
from tests.evaluation._fakes import Clock

_RNG = np.random.default_rng(0)
X = _RNG.normal(size=(64, 4)).astype("float32")
Y = (X[:, 0] > 0).astype("int64") + (X[:, 1] > 0).astype("int64")
VAL = tf.data.Dataset.from_tensor_slices((X[:32], Y[:32])).batch(8)


def _model(seed):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
    model.compile(
        keras.optimizers.SGD(0.5), "sparse_categorical_crossentropy", metrics=["accuracy"]
    )
    return model


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpts")
    dirs = {k: str(root / k) for k in ("backup", "keras_backup", "keras_file", "tf")}
    model = _model(1)
    after_epoch_1 = []
    record = keras.callbacks.LambdaCallback(
        on_epoch_end=lambda epoch, logs: epoch or after_epoch_1.append(model.get_weights())
    )
    model.fit(
        X,
        Y,
        batch_size=16,
        epochs=2,
        verbose=0,
        callbacks=[
            tfdist_opt.DistributedBackupAndRestore(dirs["backup"], delete_on_end=False),
            keras.callbacks.ModelCheckpoint(
                os.path.join(dirs["keras_file"], "m.{epoch:02d}.keras")
            ),
            record,
        ],
    )
    manager = tf.train.CheckpointManager(
        tf.train.Checkpoint(model=model, optimizer=model.optimizer), dirs["tf"], 3
    )
    manager.save()
    manager.save()
    expected = model.evaluate(VAL, verbose=0, return_dict=True)
    first = _model(3)
    first.set_weights(after_epoch_1[0])
    expected_epoch_1 = first.evaluate(VAL, verbose=0, return_dict=True)
    assert expected_epoch_1["loss"] != pytest.approx(expected["loss"], rel=1e-3)
    # Keras's BackupAndRestore cannot share a fit with ours (refused): the
    # same training again, seeded, gives the same final weights.
    again = _model(1)
    again.fit(
        X,
        Y,
        batch_size=16,
        epochs=2,
        verbose=0,
        callbacks=[keras.callbacks.BackupAndRestore(dirs["keras_backup"], delete_checkpoint=False)],
    )
    np.testing.assert_array_equal(again.get_weights()[0], model.get_weights()[0])
    return model, dirs, {"final": expected, "epoch 1": expected_epoch_1}


def _evaluate(directory, on_sleep=None, timeout=5.0, data=VAL, **kwargs):
    clock = Clock()

    def sleep(s):
        clock.sleep(s)
        if on_sleep:
            on_sleep(clock.now)

    evaluator = tfdist_opt.SidecarEvaluator(
        _model(7), data, directory, timeout=timeout, verbose=0, **kwargs
    )
    metrics = evaluator.start(tf_config={}, clock=clock, sleep=sleep)
    return evaluator, metrics


@pytest.mark.parametrize(
    "fmt,names,first",
    [
        ("backup", ["backup-4", "backup-8"], "epoch 1"),  # 4 steps an epoch
        ("keras_backup", ["latest.weights.h5"], "final"),
        ("keras_file", ["m.01.keras", "m.02.keras"], "epoch 1"),
        ("tf", ["ckpt-1", "ckpt-2"], "final"),  # both saved after fit
    ],
)
def test_every_format_evaluates_to_the_trained_model(trained, fmt, names, first):
    _, dirs, expected_at = trained
    expected = expected_at["final"]
    data = (X[:32], Y[:32]) if fmt == "tf" else VAL  # arrays as (x, y) too
    evaluator, metrics = _evaluate(dirs[fmt], data=data, log_dir=os.path.join(dirs[fmt] + "_tb"))
    assert [e.checkpoint.name for e in evaluator.outcome.evaluations] == names
    assert evaluator.outcome.reason == "timeout" and not evaluator.outcome.skipped
    assert metrics["accuracy"] == expected["accuracy"]
    assert metrics["loss"] == pytest.approx(expected["loss"], rel=1e-6)
    # The first evaluation is `evaluate` of the first checkpoint's model.
    got_first = evaluator.outcome.evaluations[0].metrics
    assert got_first["accuracy"] == expected_at[first]["accuracy"]
    assert got_first["loss"] == pytest.approx(expected_at[first]["loss"], rel=1e-6)
    assert os.listdir(dirs[fmt] + "_tb")  # the TensorBoard event file


@pytest.mark.parametrize("suffix", [".weights.h5", ".keras"])
def test_a_half_written_file_is_never_evaluated(trained, tmp_path, suffix):
    model, _, expected_at = trained
    expected = expected_at["final"]
    full = str(tmp_path / f"full{suffix}")
    (model.save_weights if suffix == ".weights.h5" else model.save)(full)
    target = tmp_path / "ckpt" / f"w{suffix}"
    target.parent.mkdir()
    data = open(full, "rb").read()
    target.write_bytes(data[: len(data) // 2])  # the chief is mid-write...

    def finish(now):  # ... and stalls past settle_s, then completes
        if now == 4.0:
            target.write_bytes(data)

    evaluator, metrics = _evaluate(str(target.parent), on_sleep=finish, timeout=10.0)
    assert len(evaluator.outcome.skipped) == 1
    assert evaluator.outcome.skipped[0].startswith(f"w{suffix}: ")
    assert len(evaluator.outcome.evaluations) == 1
    assert metrics["loss"] == pytest.approx(expected["loss"], rel=1e-6)


def test_a_checkpoint_of_another_model_is_skipped_with_a_clear_reason(tmp_path):
    other = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    tf.train.Checkpoint(net=other).write(str(tmp_path / "ckpt-1"))
    evaluator, metrics = _evaluate(str(tmp_path))
    assert metrics is None
    (why,) = evaluator.outcome.skipped
    assert "does not hold this model's weights under `model`" in why


def test_bad_arguments_are_refused_before_anything_runs():
    with pytest.raises(ValueError, match=r"`model`: expected a compiled model"):
        tfdist_opt.SidecarEvaluator(keras.Sequential([keras.layers.Dense(1)]), VAL, "d")
    with pytest.raises(ValueError, match=r"`steps`.*Received: steps=0"):
        tfdist_opt.SidecarEvaluator(_model(0), VAL, "d", steps=0)
    with pytest.raises(TypeError, match=r"`model`.*Received: model=str"):
        tfdist_opt.SidecarEvaluator("m", VAL, "d")
