"""Keras 3 step functions under our strategies: XLA per replica, generators.

A model built in the scope of a strategy from `opt_strategy()` gets its
class swapped (per instance, `tfdist_opt._class_swap`) to one with the
`KerasSteps` mixin, which builds its train and test functions:

* with `jit_compile` on and more than one replica (or several workers),
  each replica's step compiled with XLA, the gradient all-reduce outside
  it (`tfdist_opt.keras.xla_steps`, which also holds the
  `jit_fallback` for a step that cannot be compiled per replica);
* with `steps_per_execution > 1` under the multi-worker strategy, the
  loop of `tfdist_opt.keras.multi_step`.

Python generators: under any strategy, Keras's `fit` pulls one batch from a
fresh iterator to build the model (`_maybe_symbolic_build`) and then resets
the iterator. Arrays, datasets and `PyDataset`s restart from their first
batch; a generator cannot, so training began a few batches (the pulled one
and what `tf.data` prefetched) later than without a strategy, and the
weights differed. The mixin builds from the specs of the batches Keras's
generator adapter already peeked instead, consuming nothing.

The first batch Keras builds the model from is one replica's, not the
replicas' mean (`first_batch`), so a global batch the replicas do not
divide builds too.

Layers created in a `keras.RematScope` get a per-instance subclass at
`fit`, `evaluate` and `predict` that lets their recomputed call take keyword
arguments inside the steps (`remat_calls`).

A `compute_loss` override computes one device's loss values, a metric a
custom step updates with `compute_loss`'s result takes the one-device
value (`compute_loss`), and the metric logs of each batch are computed
from every replica's metric state (`metric_logs`), as on one device.

`fit` first refuses a `tf.data` global batch the replicas in sync do not
divide, before step 1 (`global_batch`). `fit` and `evaluate` leave out the
trailing `None`s of a dataset's `(x, y, sample_weight)` elements, which
TF's distributed input cannot carry (`absent_inputs`).
"""

from __future__ import annotations

import contextlib

from tfdist_opt import private_api
from tfdist_opt import runtime
from tfdist_opt.keras import absent_inputs
from tfdist_opt.keras import compute_loss as compute_loss_view
from tfdist_opt.keras import first_batch
from tfdist_opt.keras import global_batch
from tfdist_opt.keras import metric_logs
from tfdist_opt.keras import multi_step
from tfdist_opt.keras import remat_calls
from tfdist_opt.keras import xla_steps
from tfdist_opt.keras.xla_steps import (  # noqa: F401  (re-exported)
    JIT_FALLBACKS,
    UnsupportedCombinationError,
    XlaFallbackWarning,
    jit_fallback_of,
    needs_per_replica_xla,
    set_jit_fallback,
)


def needs_inlined_steps(model) -> bool:
    """True when Keras's `steps_per_execution` loop fails here (see `multi_step`)."""
    import tensorflow as tf

    return (
        model.steps_per_execution > 1
        and not model.run_eagerly
        and isinstance(model.distribute_strategy, tf.distribute.MultiWorkerMirroredStrategy)
    )


class KerasSteps:
    """Mixin in front of a Keras Model class; see the module docstring."""

    def fit(self, *args, **kwargs):
        args, kwargs = _without_absent(self.distribute_strategy, args, kwargs)
        # Layers made in a RematScope accept keyword arguments in the steps.
        remat_calls.bind_keyword_arguments(self)
        # Before Keras builds anything: a tf.data global batch the replicas
        # do not divide is refused (`global_batch`).
        global_batch.check_fit_input(self.distribute_strategy, args[0] if args else kwargs.get("x"))
        # Keras keeps these in fit's locals; recorded for the code that
        # needs them mid-fit (`runtime.FitCall`).
        with runtime.fit_call(
            self,
            fit_argument(args, kwargs, "epochs", 1),
            fit_argument(args, kwargs, "initial_epoch", 0),
            fit_argument(args, kwargs, "callbacks", None),
        ):
            return super().fit(*args, **kwargs)

    def evaluate(self, *args, **kwargs):
        args, kwargs = _without_absent(self.distribute_strategy, args, kwargs)
        remat_calls.bind_keyword_arguments(self)
        return super().evaluate(*args, **kwargs)

    def predict(self, *args, **kwargs):
        remat_calls.bind_keyword_arguments(self)
        return super().predict(*args, **kwargs)

    def predict_on_batch(self, x):
        # Keras's TF trainer hands the batch undistributed to every replica
        # and concatenates their outputs: N replicas on one worker returned
        # N copies (3 examples on 2 replicas: 6 rows). As one `predict`
        # batch it is split over the replicas and put back in order.
        strategy = self.distribute_strategy
        replicas = strategy.num_replicas_in_sync
        if replicas > 1 and len(strategy.extended.worker_devices) == replicas:
            import keras  # pylint: disable=g-import-not-at-top

            leaves = keras.tree.flatten(x)
            if leaves and getattr(leaves[0], "shape", None) is not None:
                remat_calls.bind_keyword_arguments(self)
                return super().predict(x, batch_size=int(leaves[0].shape[0]), verbose=0)
        return super().predict_on_batch(x)

    def compute_loss(self, *args, **kwargs):
        # A user's override sees one device's loss values, a metric it
        # updates too; its result is divided by the replicas once
        # (`compute_loss`).
        return compute_loss_view.compute_loss(self, super().compute_loss, args, kwargs)

    def make_train_function(self, force=False):
        if self.train_function is not None and not force:
            return self.train_function
        compute_loss_view.unscale_metric_updates(self)
        step = type(self).train_step.__get__(self)
        if needs_per_replica_xla(self):
            step = xla_steps.compiled_train_step(self, step)
        if self.distribute_strategy.num_replicas_in_sync > 1:
            step = metric_logs.synced_step(self, step)
        self._tfdist_make("train", step, force)  # sets self.train_function
        # compression="auto": the first calls are timed, then it decides.
        self.train_function = _auto_fit().wrap_train_function(self, self.train_function)
        return self.train_function

    def make_test_function(self, force=False):
        if self.test_function is not None and not force:
            return self.test_function
        compute_loss_view.unscale_metric_updates(self)
        step = type(self).test_step.__get__(self)
        if needs_per_replica_xla(self):
            step = xla_steps.compiled_step(self, "test step", step)
        if self.distribute_strategy.num_replicas_in_sync > 1:
            step = metric_logs.synced_step(self, step)
        return self._tfdist_make("test", step, force)

    def _tfdist_make(self, kind, step, force):
        if needs_inlined_steps(self):
            function = multi_step.make_function(self, step)
            setattr(self, f"{kind}_function", function)
            return function
        make = getattr(super(), f"make_{kind}_function")
        if step == getattr(type(self), f"{kind}_step").__get__(self):
            return make(force)
        with _per_replica_step(self, f"{kind}_step", step):
            return make(force)

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        # Keras's fit calls this first with its training `EpochIterator`.
        fit = runtime.FITS.get(self)
        if fit is not None and fit.epoch_iterator is None:
            fit.epoch_iterator = iterator
        if fit is not None:
            fit.building = True
        first_batch.disarm()
        try:
            first = None
            if data_batch is None:
                first = _peeked_generator_batch(iterator)
                if first is None:
                    first = _first_local_batch(iterator)
            if first is None:
                # Built from one replica's first batch, not the replicas'
                # mean (`first_batch`: uneven batches cannot be added).
                with first_batch.building():
                    return super()._maybe_symbolic_build(iterator=iterator, data_batch=data_batch)
            with self.distribute_strategy.scope():
                self._symbolic_build(data_batch=first)
        finally:
            if fit is not None:
                fit.building = False


def _without_absent(strategy, args: tuple, kwargs: dict):
    """`fit`'s / `evaluate`'s arguments with `x` as `absent_inputs` feeds it."""
    if args:
        return (absent_inputs.without_absent(strategy, args[0]), *args[1:]), kwargs
    if "x" in kwargs:
        return args, {**kwargs, "x": absent_inputs.without_absent(strategy, kwargs["x"])}
    return args, kwargs


# Positions in `keras.Model.fit(x, y, batch_size, epochs, verbose, callbacks,
# validation_split, validation_data, shuffle, class_weight, sample_weight,
# initial_epoch, ...)`.
_FIT_POSITIONS = {"epochs": 3, "callbacks": 5, "initial_epoch": 11}


def fit_argument(args: tuple, kwargs: dict, name: str, default):
    """`fit`'s argument `name` from its `*args, **kwargs`."""
    if name in kwargs:
        return kwargs[name]
    i = _FIT_POSITIONS[name]
    return args[i] if len(args) > i else default


@contextlib.contextmanager
def _per_replica_step(model, name, step):
    """Keras builds its function from `step`, with the outer function not
    XLA-compiled (`jit_compile` is read once, when the function is made).
    `jit_compile` gets back its own value: the next function made (a
    forced re-make, e.g. by `compression="auto"`) must take the same path."""
    previous = model.jit_compile
    model.jit_compile = False
    setattr(model, name, step)
    try:
        yield
    finally:
        delattr(model, name)
        model.jit_compile = previous


def _peeked_generator_batch(iterator):
    """Specs of a Python generator input's batches (from the batches Keras
    already peeked; nothing is consumed), or None for any other input."""
    adapter = getattr(iterator, "data_adapter", None)
    if isinstance(adapter, private_api.generator_data_adapter_class()):
        return adapter.get_tf_dataset().element_spec
    return None


def _first_local_batch(iterator):
    """The first batch as this process's first replica holds it, or None.

    Keras's `_maybe_symbolic_build` reduces the first batch ("MEAN" across
    replicas) only to read its shapes and dtypes: a collective per batch
    component, which TF has for few dtypes (no uint8, bool, string: MNIST's
    uint8 labels, a model taking strings) and which needs every replica's
    batch the same size. One replica's values have the shapes the mean has
    and travel nowhere.
    """
    if iterator is None:
        return None
    import keras
    import tensorflow as tf

    # Keras 3.15's epoch iterator yields (begin, end, iterator), as its own
    # `_maybe_symbolic_build` reads it; the iterator is taken as the last
    # item so that a release yielding fewer items works too.
    for item in iterator:
        batch = next(item[-1])
        break
    else:
        return None

    def local(value):
        if isinstance(value, tf.distribute.DistributedValues):
            return value.values[0]
        return value

    return keras.tree.map_structure(local, batch)


def _auto_fit():
    """`tfdist_opt.gradients.autotune.auto_fit`, imported on first use."""
    from tfdist_opt.gradients.autotune import auto_fit  # pylint: disable=g-import-not-at-top

    return auto_fit
