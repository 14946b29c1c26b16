"""Storage-aware Keras 3 saving for models built under our multi-worker strategy.

Keras 3's `model.save` / `model.save_weights` / `model.export` (and so
`ModelCheckpoint`, whose `_save_model` calls the first two) know nothing
of workers. Called from every worker on shared storage (one host, NFS) all
workers write the same file and one dies (`FileExistsError`, or
`BlockingIOError: unable to lock file` on .h5/.keras); with only the chief
writing, a worker on its own local disk has no file afterwards and code that
reads it back (`load_model` after `save`, the Keras guide's
`make_or_restore_model`) takes another branch there (issues 17 and 23).

A Keras model built inside `KerasMultiWorkerMirroredStrategy.scope()` gets
its class swapped to a subclass with the `ChiefSaving` mixin (made once per
model class; `keras_compat` puts `keras_steps.KerasSteps` in the same
subclass), the same per-instance swap as `tfdist_opt.gradients.binding.hooks`.
No Keras class is modified, and models built under any other strategy keep
their class. In the subclass, each save asks `file_writers` who writes the
file's directory: one writer per storage that workers share, and every
worker on storage it shares with nobody (decided from evidence once per
directory). The writer writes the real path; another worker of its group
writes into a fresh local temporary directory removed right after, then
waits until the writer has finished, so every worker sees the complete file
when the save returns. `fit` makes Keras's own file-writing callbacks
(`ModelCheckpoint`, `BackupAndRestore`, `CSVLogger`, `TensorBoard`) follow
the same rule (`chief_callbacks`).

The swapped class keeps the original `__name__`, `__module__` and
`__qualname__`, so a saved `.keras` file names the original class and
loads as a plain Keras model.
"""

from __future__ import annotations

import os

from tfdist_opt import _class_swap
from tfdist_opt.stall import keras_binding as stall_binding
from tfdist_opt.strategy.saving import chief_callbacks
from tfdist_opt.strategy.saving import file_writers
from tfdist_opt.keras import model_registry


def _write(model, method, filepath, args, kwargs):
    if not isinstance(filepath, (str, os.PathLike)):
        return method(filepath, *args, **kwargs)  # a file object: the caller's own
    path = os.fspath(filepath)
    with file_writers.write_scope(
        model._distribute_strategy, os.path.dirname(os.path.abspath(path)), barrier=True
    ) as scratch:
        with stall_binding.saving():
            if scratch is None:
                return method(filepath, *args, **kwargs)
            name = os.path.basename(os.path.normpath(path))
            return method(os.path.join(scratch, name), *args, **kwargs)


class ChiefSaving:
    """Mixin in front of a Keras Model class; see the module docstring."""

    def save(self, filepath, *args, **kwargs):
        return _write(self, super().save, filepath, args, kwargs)

    def save_weights(self, filepath, *args, **kwargs):
        return _write(self, super().save_weights, filepath, args, kwargs)

    def export(self, filepath, *args, **kwargs):
        return _write(self, super().export, filepath, args, kwargs)

    def fit(self, *args, **kwargs):
        callbacks = kwargs.get("callbacks")
        if callbacks is None and len(args) > 5:
            callbacks = args[5]  # fit(x, y, batch_size, epochs, verbose, callbacks, ...)
        chief_callbacks.adopt(callbacks)
        # The stall inspector (`tfdist_opt.stall`): progress callbacks around
        # the user's, one thread for this fit.
        args, kwargs, watch = stall_binding.watch_fit(self, args, kwargs)
        try:
            return super().fit(*args, **kwargs)
        finally:
            if watch is not None:
                watch.stop()


def saving_class(cls: type) -> type:
    """The cached `ChiefSaving` subclass of Keras model class `cls`."""
    return _class_swap.cached_subclass(ChiefSaving, cls)


def adopt_models(strategy, mixin: type | None = None) -> int:
    """Swaps the class of every Keras model built under `strategy`; returns how many.

    `mixin` defaults to `ChiefSaving`; the parameter-server strategy passes
    its own (`tfdist_opt.parameter_server.keras_model.CoordinatorTraining`).
    The models are those `model_registry` noted while our scope was
    entered (where Keras built them), so a scope entry with nothing new
    built costs nothing. Inside a `tf.function` nothing is swapped; the
    next scope entry or exit outside one does it.
    """
    import tensorflow as tf

    if tf.inside_function():
        return 0
    n = 0
    for model in model_registry.take(strategy):
        if not isinstance(model, mixin or ChiefSaving):
            model.__class__ = _class_swap.cached_subclass(mixin or ChiefSaving, type(model))
            n += 1
    return n
