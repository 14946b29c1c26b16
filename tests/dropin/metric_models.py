"""Custom metrics, losses and `add_loss` as keras.io writes them (issue 62).

Shared by the in-process test (tests/dropin/test_custom_metrics.py) and the
2-worker script (tests/multiworker/scripts/dropin_inputs.py).
"""

from __future__ import annotations

import numpy as np

N = 32
BATCH = 8


def _keras():
    import keras

    return keras


def metric_classes():
    keras = _keras()
    ops = keras.ops

    class BinaryTruePositives(keras.metrics.Metric):
        """keras.io's example: `result()` returns its variable."""

        def __init__(self, name="binary_true_positives", **kwargs):
            super().__init__(name=name, **kwargs)
            self.true_positives = self.add_variable(shape=(), initializer="zeros", name="tp")

        def update_state(self, y_true, y_pred, sample_weight=None):
            y_true = ops.cast(y_true, "bool")
            y_pred = ops.cast(ops.greater(y_pred, 0.0), "bool")
            values = ops.cast(
                ops.logical_and(ops.equal(y_true, True), ops.equal(y_pred, True)), self.dtype
            )
            if sample_weight is not None:
                values = ops.multiply(
                    values, ops.cast(ops.reshape(sample_weight, ops.shape(values)), self.dtype)
                )
            self.true_positives.assign_add(ops.sum(values))

        def result(self):
            return self.true_positives

        def reset_state(self):
            self.true_positives.assign(0.0)

    class MeanAbs(keras.metrics.Metric):
        """A mean from a total and a count: `result()` returns a tensor."""

        def __init__(self, name="mean_abs", **kwargs):
            super().__init__(name=name, **kwargs)
            self.total = self.add_variable(shape=(), initializer="zeros", name="total")
            self.count = self.add_variable(shape=(), initializer="zeros", name="count")

        def update_state(self, y_true, y_pred, sample_weight=None):
            err = ops.abs(ops.cast(y_true, "float32") - y_pred)
            self.total.assign_add(ops.sum(err))
            self.count.assign_add(ops.cast(ops.size(err), "float32"))

        def result(self):
            return ops.divide_no_nan(self.total, self.count)

    class Counts(keras.metrics.Metric):
        """Counts examples and positives: `result()` returns a dict."""

        def __init__(self, name="counts", **kwargs):
            super().__init__(name=name, **kwargs)
            self.seen = self.add_variable(shape=(), initializer="zeros", name="seen")
            self.positives = self.add_variable(shape=(), initializer="zeros", name="positives")

        def update_state(self, y_true, y_pred, sample_weight=None):
            self.seen.assign_add(ops.cast(ops.shape(y_true)[0], "float32"))
            self.positives.assign_add(ops.sum(ops.cast(y_true, "float32")))

        def result(self):
            return {"seen": self.seen, "positives": self.positives}

    return BinaryTruePositives, MeanAbs, Counts


def loss_class():
    keras = _keras()

    class ScaledMSE(keras.losses.Loss):
        def __init__(self, scale=2.0, name="scaled_mse", **kwargs):
            super().__init__(name=name, **kwargs)
            self.scale = scale

        def call(self, y_true, y_pred):
            y_true = keras.ops.cast(y_true, y_pred.dtype)
            return self.scale * keras.ops.mean(keras.ops.square(y_true - y_pred), axis=-1)

    return ScaledMSE


def data(seed=0):
    rng = np.random.RandomState(seed)
    x = rng.randn(N, 4).astype("float32")
    y = rng.randint(0, 2, size=(N, 1)).astype("float32")
    w = rng.uniform(0.5, 2.0, size=(N,)).astype("float32")
    return x, y, w


def build_model():
    keras = _keras()
    BinaryTruePositives, MeanAbs, Counts = metric_classes()
    ScaledMSE = loss_class()

    class ActivityPenalty(keras.layers.Layer):
        def call(self, x):
            self.add_loss(0.01 * keras.ops.mean(keras.ops.square(x)))
            return x

    init = lambda s: keras.initializers.GlorotUniform(seed=s)  # noqa: E731
    inputs = keras.Input((4,))
    h = keras.layers.Dense(6, activation="relu", kernel_initializer=init(1))(inputs)
    h = ActivityPenalty()(h)
    out = keras.layers.Dense(1, kernel_initializer=init(2))(h)
    model = keras.Model(inputs, out)
    model.compile(
        keras.optimizers.SGD(0.05),
        loss=ScaledMSE(),
        metrics=[BinaryTruePositives(), MeanAbs(), Counts(), "mae"],
        weighted_metrics=[BinaryTruePositives(name="weighted_tp"), "mse"],
    )
    return model


class LogsSeen:
    """A callback's record of the logs Keras hands it (made lazily: Keras)."""

    def __new__(cls):
        keras = _keras()

        class _Seen(keras.callbacks.Callback):
            def __init__(self):
                super().__init__()
                self.batches = []
                self.test_batches = []
                self.epochs = []

            def on_train_batch_end(self, batch, logs=None):
                self.batches.append({k: float(v) for k, v in (logs or {}).items()})

            def on_test_batch_end(self, batch, logs=None):
                self.test_batches.append({k: float(v) for k, v in (logs or {}).items()})

            def on_epoch_end(self, epoch, logs=None):
                self.epochs.append({k: float(v) for k, v in (logs or {}).items()})

        return _Seen()


def fit_and_evaluate(strategy, build, x, y, sample_weight=None):
    """`build()` in `strategy`'s scope (none: no strategy), then fit and evaluate.

    Returns {"history", "evaluate", "batch_logs", "test_batch_logs",
    "epoch_logs", "weights"} (the test batches: `evaluate`'s).
    """
    if strategy is None:
        model = build()
    else:
        with strategy.scope():
            model = build()
    seen = LogsSeen()
    history = model.fit(
        x, y, sample_weight=sample_weight, batch_size=BATCH, epochs=2, shuffle=False, verbose=0,
        callbacks=[seen],
    ).history  # fmt: skip
    seen.test_batches.clear()  # fit has no validation: nothing there yet
    evaluation = model.evaluate(
        x, y, sample_weight=sample_weight, batch_size=BATCH, verbose=0, return_dict=True,
        callbacks=[seen],
    )  # fmt: skip
    return {
        "history": {k: [float(v) for v in vs] for k, vs in history.items()},
        "evaluate": {k: float(v) for k, v in evaluation.items()},
        "batch_logs": seen.batches,
        "test_batch_logs": seen.test_batches,
        "epoch_logs": seen.epochs,
        "weights": [u.tolist() for u in model.get_weights()],
    }


def run(strategy=None):
    """`build_model()` fitted and evaluated with sample weights (`fit_and_evaluate`)."""
    x, y, w = data()
    return fit_and_evaluate(strategy, build_model, x, y, sample_weight=w)


def assert_close(a, b, rtol, atol):
    """Nested dicts and lists of numbers `b` equal to `a` (same keys, allclose)."""
    if isinstance(a, dict):
        assert a.keys() == b.keys(), (sorted(a), sorted(b))
        for key in a:
            assert_close(a[key], b[key], rtol, atol)
    elif isinstance(a, list) and any(isinstance(u, (dict, list)) for u in a):
        assert len(a) == len(b)
        for u, v in zip(a, b):
            assert_close(u, v, rtol, atol)
    else:
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=rtol, atol=atol)


def loss_tracking_model_class():
    """Keras's `test_metric_update_in_compute_loss`, plus a loss object and `add_loss`."""
    keras = _keras()

    class LossTrackingModel(keras.Model):
        def __init__(self):
            super().__init__()
            self.custom_metric = keras.metrics.Mean(name="custom")
            self.direct_metric = keras.metrics.Mean(name="direct")
            self.dense = keras.layers.Dense(
                2, kernel_initializer=keras.initializers.GlorotUniform(seed=1)
            )
            self.loss_fn = keras.losses.MeanAbsoluteError()

        def call(self, x):
            y = self.dense(x)
            self.add_loss(0.01 * keras.ops.mean(keras.ops.square(y)))
            return y

        def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
            loss = super().compute_loss(x, y, y_pred, sample_weight, training)
            self.custom_metric.update_state(loss * 4)
            direct = self.loss_fn(y, y_pred)
            self.direct_metric.update_state(direct)
            return loss + direct

    return LossTrackingModel


def run_compute_loss(strategy=None):
    """`loss_tracking_model_class()` fitted and evaluated (`fit_and_evaluate`)."""
    keras = _keras()
    rng = np.random.RandomState(0)
    x = rng.randn(N, 4).astype("float32")
    y = rng.randn(N, 2).astype("float32")

    def build():
        model = loss_tracking_model_class()()
        model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
        return model

    return fit_and_evaluate(strategy, build, x, y)
