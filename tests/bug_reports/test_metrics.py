"""Bug reports: metrics under 2 replicas count and average as on one device.

Each test: a user's report, the code as filed (docs/guides/bug-reports.md).
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.bug_reports.support import two_replicas

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
