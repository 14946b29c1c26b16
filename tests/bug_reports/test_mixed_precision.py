"""Bug reports: mixed precision (with XLA) under 2 replicas.

Each test: a user's report, the code as filed (docs/guides/bug-reports.md).
"""

import keras
import numpy as np
import pytest

from tests.bug_reports.support import two_replicas

pytestmark = pytest.mark.usefixtures("no_tf_config")


def test_keras_21366_mixed_float16_jit_compile_trains():
    """https://github.com/keras-team/keras/issues/21366 (2025-06).

    Reporter: `mixed_float16` + MirroredStrategy + `compile(jit_compile=True)`
    crashed in `LossScaleOptimizer` ("merge_call called while defining a
    new graph or a tf.function"), even with a trivial model.
    """
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        with two_replicas().scope():
            model = keras.Sequential(
                [
                    keras.layers.Input(shape=(32,)),
                    keras.layers.Dense(64, activation="relu"),
                    keras.layers.Dense(64, activation="relu"),
                    keras.layers.Dense(10),
                ]
            )
            model.compile(
                optimizer=keras.optimizers.Adam(),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                jit_compile=True,
            )
        x = np.random.RandomState(0).randn(64, 32).astype("float32")
        y = np.random.RandomState(1).randint(0, 10, (64,))
        history = model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    finally:
        keras.mixed_precision.set_global_policy(previous)
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    assert np.isfinite(history.history["loss"][0])


def test_keras_20763_mixed_float16_xla_cnn_trains():
    """https://github.com/keras-team/keras/issues/20763 (2025-01).

    Reporter: multi-GPU training with XLA and mixed precision, which
    trained before TF 2.11, failed under MirroredStrategy with 2 GPUs: with
    Keras 3.8 "merge_call called while defining a new graph or a
    tf.function" (from the `Cond` of `LossScaleOptimizer`), with Keras 3.5
    it hung. A small CNN with `mixed_float16`, `jit_compile=True` and a
    float32 softmax. Expected: it trains.
    """
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        with two_replicas().scope():
            model = keras.Sequential(
                [
                    keras.Input((32, 32, 3)),
                    keras.layers.Conv2D(8, 3, activation="relu"),
                    keras.layers.GlobalAveragePooling2D(),
                    keras.layers.Dense(10),
                    keras.layers.Activation("softmax", dtype="float32"),
                ]
            )
            model.compile(
                optimizer=keras.optimizers.Adam(),
                loss="sparse_categorical_crossentropy",
                metrics=["accuracy"],
                jit_compile=True,
            )
        x = np.random.RandomState(0).rand(32, 32, 32, 3).astype("float32")
        y = np.random.RandomState(1).randint(0, 10, (32,))
        history = model.fit(x, y, batch_size=8, epochs=2, verbose=0)
    finally:
        keras.mixed_precision.set_global_policy(previous)
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    assert all(np.isfinite(history.history["loss"]))
