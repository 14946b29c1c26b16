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
  `keras.Model.fit(model, ...)` called unbound) it stops at its first
  batch with a message naming `tfdist_opt.parameter_server.fit` instead of
  TF's.
"""

from __future__ import annotations

import collections.abc
import contextlib

import tensorflow as tf

from tfdist_opt import _class_swap
from tfdist_opt.keras import model_registry

FIT_INSTEAD = (
    "Keras 3 `model.fit` / `evaluate` / `predict` cannot run under "
    "parameter-server training: Keras 3 has no ClusterCoordinator support "
    "(keras-team/keras#18624). Build the model inside `strategy.scope()` "
    "(then `model.fit` and the others run on the cluster), or call "
    "`tfdist_opt.parameter_server.fit(model, ...)` (or `evaluate`, "
    "`predict`); it takes the same arguments and returns the same result"
    " (e.g. `history = tfdist_opt.parameter_server.fit(model, x, y, epochs=3)`)."
)


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
        self.ps_addresses = tuple(cluster_resolver.cluster_spec().as_dict().get("ps", ()))
        super().__init__(cluster_resolver, *args, **kwargs)

    @contextlib.contextmanager
    def scope(self):
        """The upstream scope; Keras models built in it train on the cluster.

        On entry and exit, every Keras model Keras built under this strategy
        (noted by `model_registry`) gets the `keras_model.CoordinatorTraining`
        subclass.
        """
        from tfdist_opt.parameter_server import keras_model

        keras_model.adopt_models(self)
        try:
            with super().scope(), model_registry.recording():
                yield self
        finally:
            keras_model.adopt_models(self)

    def experimental_distribute_dataset(self, dataset, options=None):
        """The upstream method; iterating its result directly names our `fit`.

        Keras 3's trainer iterates the distributed dataset itself, where
        TF's message says to pass it to `create_per_worker_dataset`; the
        result's class is swapped (per instance) to one that says what to
        call instead (`KerasParameterServerError`). Passed to
        `ClusterCoordinator.create_per_worker_dataset`, it works as upstream.
        """
        distributed = super().experimental_distribute_dataset(dataset, options)
        try:
            distributed.__class__ = _class_swap.cached_subclass(_NamesOurFit, type(distributed))
        except TypeError:
            pass  # another dataset type: TF's own message
        return distributed

    @property
    def coordinator(self) -> tf.distribute.coordinator.ClusterCoordinator:
        """This strategy's `ClusterCoordinator` (one per strategy, made on first use)."""
        return tf.distribute.coordinator.ClusterCoordinator(self)


class _NamesOurFit(collections.abc.Iterable):
    """Mixin in front of a distributed dataset class: `iter()` outside the
    coordinator raises `KerasParameterServerError` instead of TF's message.

    Based on `collections.abc.Iterable`, as TF's distributed datasets are
    (the `__class__` swap needs the same layout).
    """

    def __iter__(self):
        try:
            return super().__iter__()
        except ValueError as e:
            if "create_per_worker_dataset" not in str(e):
                raise
            raise KerasParameterServerError(FIT_INSTEAD) from None
