"""`KerasParameterServerStrategy`: ParameterServerStrategy under which Keras 3 `fit` works.

Keras 3 has no `ClusterCoordinator` code (its maintainers declined PS
support: keras-team/keras#18624, #20585). Under a plain
`tf.distribute.ParameterServerStrategy`, `model.fit` fails inside Keras
with `ValueError: To use this dataset, you need to pass this dataset to
ClusterCoordinator.create_per_worker_dataset.` This subclass overrides two
public methods:

- `scope`: a Keras model built in it gets a per-instance subclass whose
  `fit` / `evaluate` / `predict` are `tfdist_opt.parameter_server.fit` /
  `evaluate` / `predict` (keras_model.py), so `model.fit(...)` trains on
  the cluster.
- `experimental_distribute_dataset`: if Keras 3's own trainer still gets
  here (a model built outside the scope and moved into it, or
  `keras.Model.fit(model, ...)` called unbound) it stops at once with a
  message naming `tfdist_opt.parameter_server.fit` instead of TF's.
"""

from __future__ import annotations

import contextlib
import inspect

import tensorflow as tf

from tfdist_opt.strategy import chief_saving

FIT_INSTEAD = (
    "Keras 3 `model.{method}` cannot run under parameter-server training: "
    "Keras 3 has no ClusterCoordinator support (keras-team/keras#18624). "
    "Build the model inside `strategy.scope()` (then `model.{method}` runs "
    "on the cluster), or call `tfdist_opt.parameter_server.{method}(model, ...)`; "
    "it takes the same arguments and returns the same result"
    " (e.g. `history = tfdist_opt.parameter_server.fit(model, x, y, epochs=3)`).")


class KerasParameterServerError(RuntimeError):
    """Keras 3's own fit/evaluate/predict was called under PS training."""


class KerasParameterServerStrategy(tf.distribute.ParameterServerStrategy):
    """A `tf.distribute.ParameterServerStrategy` for Keras 3 users.

    Same constructor as TF's. A Keras model built in `scope()` trains with
    its own `fit` / `evaluate` / `predict`, run by
    `tfdist_opt.parameter_server.fit` / `evaluate` / `predict` (the explicit
    form, same arguments).

    Example:
        >>> strategy = tfdist_opt.opt_strategy()   # doctest: +SKIP
        >>> with strategy.scope():
        ...     model = make_model(); model.compile("adam", "mse")
        >>> model.fit(x, y, epochs=2)
    """

    def __init__(self, cluster_resolver, *args, **kwargs):
        # Read now: after a ps task is lost the resolver may not answer, and
        # the failure message names the lost task's address.
        self.ps_addresses = tuple(
            cluster_resolver.cluster_spec().as_dict().get("ps", ()))
        super().__init__(cluster_resolver, *args, **kwargs)

    @contextlib.contextmanager
    def scope(self):
        """The upstream scope; Keras models built in it train on the cluster.

        On entry and exit, every Keras model whose `_distribute_strategy` is
        this strategy gets the `keras_model.CoordinatorTraining` subclass.
        The heap scan runs only when a variable or Keras object was created
        since the last one (`chief_saving.adopt_models`).
        """
        from tfdist_opt.parameter_server import keras_model
        keras_model.adopt_models(self)
        try:
            with super().scope(), tf.variable_creator_scope(chief_saving.count_variable):
                yield self
        finally:
            keras_model.adopt_models(self)

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
