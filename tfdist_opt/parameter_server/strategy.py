"""`KerasParameterServerStrategy`: ParameterServerStrategy that says what to call.

Keras 3 has no `ClusterCoordinator` code (its maintainers declined PS
support: keras-team/keras#18624, #20585). Under a plain
`tf.distribute.ParameterServerStrategy`, `model.fit` fails inside Keras
with `ValueError: To use this dataset, you need to pass this dataset to
ClusterCoordinator.create_per_worker_dataset.` This subclass overrides one
public method, `experimental_distribute_dataset`, so that Keras 3's
`fit`/`evaluate`/`predict` stop at once with a message naming
`tfdist_opt.parameter_server.fit` (same arguments) instead.
"""

from __future__ import annotations

import inspect

import tensorflow as tf

FIT_INSTEAD = (
    "Keras 3 `model.{method}` cannot run under parameter-server training: "
    "Keras 3 has no ClusterCoordinator support (keras-team/keras#18624). "
    "Call `tfdist_opt.parameter_server.{method}(model, ...)` instead; it takes "
    "the same arguments and returns the same result"
    " (e.g. `history = tfdist_opt.parameter_server.fit(model, x, y, epochs=3)`).")


class KerasParameterServerError(RuntimeError):
    """Keras 3's own fit/evaluate/predict was called under PS training."""


class KerasParameterServerStrategy(tf.distribute.ParameterServerStrategy):
    """A `tf.distribute.ParameterServerStrategy` for Keras 3 users.

    Same constructor as TF's. Train with `tfdist_opt.parameter_server.fit`;
    Keras 3's `model.fit` raises `KerasParameterServerError` saying so.

    Example:
        >>> strategy = tfdist_opt.opt_strategy()   # doctest: +SKIP
        >>> with strategy.scope():
        ...     model = make_model(); model.compile("adam", "mse")
        >>> tfdist_opt.parameter_server.fit(model, x, y, epochs=2)
    """

    def __init__(self, cluster_resolver, *args, **kwargs):
        # Read now: after a ps task is lost the resolver may not answer, and
        # the failure message names the lost task's address.
        self.ps_addresses = tuple(
            cluster_resolver.cluster_spec().as_dict().get("ps", ()))
        super().__init__(cluster_resolver, *args, **kwargs)

    def experimental_distribute_dataset(self, dataset, options=None):
        keras_method = _keras_caller()
        if keras_method is not None:
            raise KerasParameterServerError(FIT_INSTEAD.format(method=keras_method))
        return super().experimental_distribute_dataset(dataset, options)

    @property
    def coordinator(self) -> tf.distribute.coordinator.ClusterCoordinator:
        """This strategy's `ClusterCoordinator` (one per strategy, made on first use)."""
        return tf.distribute.coordinator.ClusterCoordinator(self)


def _keras_caller() -> str | None:
    """`"fit"`, `"evaluate"` or `"predict"` when called from Keras 3's trainer."""
    frame = inspect.currentframe()
    try:
        f = frame.f_back.f_back if frame and frame.f_back else None
        depth = 0
        keras_seen = False
        while f is not None and depth < 12:
            module = f.f_globals.get("__name__", "")
            if module.startswith("keras."):
                keras_seen = True
                if f.f_code.co_name in ("fit", "evaluate", "predict"):
                    return f.f_code.co_name
            elif keras_seen:
                break
            f = f.f_back
            depth += 1
        return "fit" if keras_seen else None
    finally:
        del frame
