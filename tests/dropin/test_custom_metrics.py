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

Tolerance: rel 1e-5, abs 1e-6 (the replicas' halves of a batch are added in
another order).
"""

import keras
import numpy as np
import pytest

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
