"""Custom metrics and losses on 2 replicas equal one device (issue 62).

In this process, on 2 of the session's virtual CPUs (tests/conftest.py);
tests/multiworker/test_dropin_inputs.py runs the same model on 2 workers.
Compared: `fit`'s history, `evaluate`, and the logs a callback sees after
every train and test batch and every epoch.

- `metric_models.build_model`: keras.io's `BinaryTruePositives` (`result()`
  returns its variable), a metric whose `result()` is a tensor, one that
  returns a dict of counts, "mae", a custom loss class, `add_loss` in a
  layer, `sample_weight`, and `weighted_metrics` (a weighted mean, "mse",
  was logged per batch as the mean of the replicas' weighted means before
  `tfdist_opt.keras.metric_logs`).
- A `Model` subclass whose `compute_loss` override updates a metric with
  the loss (Keras's `test_metric_update_in_compute_loss`), with
  `super().compute_loss()`, a `keras.losses.Loss` called directly and
  `add_loss`: it tracked half the one-device value on 2 replicas before
  `tfdist_opt.keras.compute_loss`.
- keras.io's "customizing what happens in fit": a custom `train_step` and
  `test_step` calling `self.compute_loss` and updating a
  `keras.metrics.Mean` loss tracker with its result logged half the
  one-device loss on 2 replicas (as plain `MirroredStrategy` does), with
  the weights right.

Tolerance: rel 1e-5, abs 1e-6 (the replicas' halves of a batch are added in
another order).
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfdist_opt
from tests.dropin import metric_models

RTOL, ATOL = 1e-5, 1e-6

pytestmark = pytest.mark.usefixtures("no_tf_config")


def _close(a, b):
    metric_models.assert_close(a, b, RTOL, ATOL)


@pytest.fixture(scope="module")
def metric_runs():
    return metric_models.run(None), metric_models.run(tfdist_opt.opt_strategy(cpu_replicas=2))


@pytest.mark.parametrize(
    "key", ["history", "evaluate", "epoch_logs", "batch_logs", "test_batch_logs", "weights"]
)
def test_custom_metrics_and_losses_on_two_replicas_equal_one_device(metric_runs, key):
    one, two = metric_runs
    assert one[key], key  # something was compared
    _close(one[key], two[key])


def test_weighted_mean_per_batch_is_the_one_device_value(metric_runs):
    """Was 0.691 (the replicas' weighted means averaged) against 0.720."""
    one, two = metric_runs
    np.testing.assert_allclose(two["batch_logs"][0]["mse"], one["batch_logs"][0]["mse"], rtol=RTOL)
    np.testing.assert_allclose(
        two["test_batch_logs"][0]["mse"], one["test_batch_logs"][0]["mse"], rtol=RTOL
    )


def test_counting_metric_counts_every_example(metric_runs):
    _, two = metric_runs
    assert two["evaluate"]["seen"] == metric_models.N
    assert [b["seen"] for b in two["test_batch_logs"]] == [8.0, 16.0, 24.0, 32.0]


def test_metric_updated_in_compute_loss_equals_one_device():
    """It tracked half the one-device value on 2 replicas (the loss / replicas)."""
    one = metric_models.run_compute_loss(None)
    two = metric_models.run_compute_loss(tfdist_opt.opt_strategy(cpu_replicas=2))
    _close(one, two)
    # Keras's own assertion: the metric is 4 times the logged loss (the
    # override adds the direct term to the loss it returns).
    custom, loss, direct = (two["history"][k][0] for k in ("custom", "loss", "direct"))
    np.testing.assert_allclose(custom, 4 * (loss - direct), rtol=1e-5)


@pytest.mark.parametrize(
    "options",
    [{"run_eagerly": True}, {"jit_compile": True}, {"steps_per_execution": 2}],
    ids=["run_eagerly", "jit_compile", "steps_per_execution"],
)
def test_weighted_mean_logs_equal_one_device_under_keras_options(options):
    """The per-batch sync runs eagerly, beside a step compiled per replica
    with XLA, and inside Keras's multi-step loop."""
    x, y, w = metric_models.data()

    def build():
        inputs = keras.Input((4,))
        out = keras.layers.Dense(1, kernel_initializer=keras.initializers.GlorotUniform(seed=2))(
            inputs
        )
        model = keras.Model(inputs, out)
        model.compile(
            keras.optimizers.SGD(0.05),
            loss="mse",
            metrics=["mae"],
            weighted_metrics=["mse"],
            **options,
        )
        return model

    def run(strategy):
        return metric_models.fit_and_evaluate(strategy, build, x, y, sample_weight=w)

    _close(run(None), run(tfdist_opt.opt_strategy(cpu_replicas=2)))


class KerasIoCustomStep(keras.Model):
    """keras.io's "customizing what happens in fit" (Keras 3, TensorFlow)."""

    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(
            1, kernel_initializer=keras.initializers.GlorotUniform(seed=3)
        )
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.mae_metric = keras.metrics.MeanAbsoluteError(name="mae")

    def call(self, x):
        return self.dense(x)

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(y=y, y_pred=y_pred)
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply(grads, self.trainable_variables)
        self.loss_tracker.update_state(loss)
        self.mae_metric.update_state(y, y_pred)
        return {"loss": self.loss_tracker.result(), "mae": self.mae_metric.result()}

    def test_step(self, data):
        x, y = data
        y_pred = self(x, training=False)
        self.loss_tracker.update_state(self.compute_loss(y=y, y_pred=y_pred))
        self.mae_metric.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}

    @property
    def metrics(self):
        return [self.loss_tracker, self.mae_metric]


@pytest.mark.parametrize("jit_compile", [False, True], ids=["graph", "jit_compile"])
def test_custom_train_step_loss_tracker_equals_one_device(jit_compile):
    """It logged half the one-device loss (`compute_loss` returns the loss
    divided by the replicas, which the step differentiates)."""
    rng = np.random.RandomState(0)
    x = rng.rand(32, 3).astype("float32")
    y = rng.rand(32, 1).astype("float32")

    def run(strategy):
        with strategy.scope():
            model = KerasIoCustomStep()
            model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", jit_compile=jit_compile)
            history = model.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0).history
            evaluated = model.evaluate(x, y, batch_size=8, return_dict=True, verbose=0)
            return {
                "history": history,
                "evaluate": evaluated,
                "weights": [w.tolist() for w in model.get_weights()],
            }

    one = run(tf.distribute.get_strategy())
    two = run(tfdist_opt.opt_strategy(cpu_replicas=2))
    _close(one, two)
