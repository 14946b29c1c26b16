"""Bug reports: metrics under 2 replicas count and average as on one device.

Each test: a user's report, the code as filed (docs/guides/bug-reports.md).
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.bug_reports.support import RTOL, one_device, two_replicas

pytestmark = pytest.mark.usefixtures("no_tf_config")


def test_keras_21054_stateful_metric_counts_every_input():
    """https://github.com/keras-team/keras/issues/21054 (2025-03).

    Reporter: a metric that counts its inputs (an int32 weight,
    `assign_add(tf.shape(y_pred)[0])`) reported the wrong count under 4
    replicas; tf-keras gave 120 for 120 inputs.
    """

    class CountInputs(keras.metrics.Metric):
        def __init__(self):
            super().__init__()
            self.var = self.add_weight(name="var", initializer="zeros", dtype="int32")

        def update_state(self, y_true, y_pred, sample_weight=None):
            self.var.assign_add(tf.shape(y_pred)[0])

        def reset_state(self):
            self.var.assign(0)

        def result(self):
            return tf.cast(self.var, "float32")

    batch_size = 12
    x = np.zeros((batch_size * 10, 1), "float32")
    y = np.zeros((batch_size * 10, 1), "float32")
    with two_replicas().scope():
        inp = keras.Input(shape=(1,))
        model = keras.Model(inp, keras.layers.Dense(10)(inp))
        model.compile(loss="mse", optimizer="sgd", metrics=[CountInputs()])
        logs = model.evaluate(x, y, batch_size=batch_size, verbose=0, return_dict=True)
    counts = [v for k, v in logs.items() if k != "loss"]
    assert counts == [120.0]


def test_keras_19280_accuracy_is_a_mean_not_a_sum_over_replicas():
    """https://github.com/keras-team/keras/issues/19280 (2024-03), also
    https://github.com/keras-team/keras/issues/19340 (2024-03).

    Reporter: with 2 GPUs under MirroredStrategy (Keras 3.0.5) the
    progress bar showed `categorical_accuracy: 1.6163` — the replicas'
    metric values were summed, not averaged (#19340: 3.57 on 4 GPUs, and
    the epoch's loss `nan`). The reporter's MNIST pipeline (32x32x1
    images, one-hot labels, batch 64) and functional MLP. Expected: the
    accuracy is a fraction, and loss and accuracy equal one device's.
    """
    rng = np.random.RandomState(0)
    x_train = rng.randint(0, 256, (256, 28, 28)).astype("uint8")
    y_train = rng.randint(0, 10, (256,)).astype("uint8")

    def mnist_process(x, y):
        x = tf.expand_dims(tf.cast(x, dtype=tf.float32), axis=-1)
        x = tf.image.resize(x, [32, 32])
        y = tf.one_hot(y, depth=10)
        return x, y

    def run(strategy):
        train_ds = tf.data.Dataset.from_tensor_slices((x_train, y_train))
        train_ds = train_ds.map(mnist_process).batch(64)
        with strategy.scope():
            keras.utils.set_random_seed(1)
            inputs = keras.Input(shape=(32, 32, 1))
            x = keras.layers.Flatten()(inputs)
            x = keras.layers.Dense(128, activation="relu")(x)
            y = keras.layers.Dense(units=10, activation="softmax")(x)
            func_model = keras.Model(inputs=[inputs], outputs=[y])
            func_model.compile(
                loss=keras.losses.CategoricalCrossentropy(),
                metrics=[keras.metrics.CategoricalAccuracy()],
                optimizer=keras.optimizers.Adam(),
            )
        return func_model.fit(train_ds, epochs=2, verbose=0).history

    history = run(two_replicas())
    assert all(0.0 <= a <= 1.0 for a in history["categorical_accuracy"])
    assert all(np.isfinite(history["loss"]))
    want = run(one_device())
    np.testing.assert_allclose(history["loss"], want["loss"], rtol=RTOL)
    np.testing.assert_allclose(
        history["categorical_accuracy"], want["categorical_accuracy"], rtol=RTOL
    )
