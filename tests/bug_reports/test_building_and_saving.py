"""Bug reports: building models in the scope, saving and loading their weights.

Each test: a user's report, the code as filed (docs/guides/bug-reports.md).
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.bug_reports.support import two_replicas

pytestmark = pytest.mark.usefixtures("no_tf_config")


def test_keras_20611_dropout_model_builds_and_trains():
    """https://github.com/keras-team/keras/issues/20611 (2024-12), also
    https://github.com/tensorflow/tensorflow/issues/82281 (2024-12).

    Reporter: a Sequential with `Dropout` could not even be created under
    MirroredStrategy with Keras 3.7 (3.5 was fine).
    """
    with two_replicas().scope():
        model = keras.Sequential(
            [
                keras.layers.Dense(128, activation="gelu"),
                keras.layers.Dropout(0.2),
                keras.layers.Dense(128),
            ]
        )
        model.compile("adam", "mse")
    x = np.random.RandomState(0).randn(32, 16).astype("float32")
    history = model.fit(x, np.zeros((32, 128), "float32"), batch_size=8, verbose=0)
    assert np.isfinite(history.history["loss"][0])


def test_tensorflow_62831_load_weights_under_mirrored_scope(tmp_path):
    """https://github.com/tensorflow/tensorflow/issues/62831 (2024-01).

    Reporter: `model.load_weights('./model.weights.h5')` in a
    MirroredStrategy scope raised "unsupported operand type(s) for /:
    'Dataset' and 'int'" (fine with OneDeviceStrategy).
    """
    path = str(tmp_path / "model.weights.h5")
    dataset = tf.data.Dataset.from_tensors(([1.0], [1.0])).repeat(100).batch(10)
    with two_replicas().scope():
        model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
        model.compile(loss="mse", optimizer="sgd")
    model.fit(dataset, epochs=1, verbose=0)
    model.save_weights(path)
    trained = [np.asarray(w) for w in model.weights]
    with two_replicas().scope():
        restored = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
        restored.compile(loss="mse", optimizer="sgd")
        restored.load_weights(path)
    for got, want in zip(restored.weights, trained):
        np.testing.assert_array_equal(np.asarray(got), want)
