"""Chief-aware Keras 3 saving for models built under our multi-worker strategy.

Keras 3's `model.save` / `model.save_weights` (and so `ModelCheckpoint`,
whose `_save_model` only calls those two) are not chief-aware: called from
every worker on shared storage (one host, NFS) all workers write the same
file and one dies (`FileExistsError`, or `BlockingIOError: unable to lock
file` on .h5/.keras). tf_keras handled this by giving non-chief workers
temporary paths (issue 17).

A Keras model built inside `KerasMultiWorkerMirroredStrategy.scope()` gets
its class swapped to `saving_class(type(model))`, a subclass made once per
model class (the same per-instance swap as `tfdist_opt.gradients.hooks`).
No Keras class is modified, and models built under any other strategy keep
their class. In the subclass, the chief writes the real path; every other
worker writes to a fresh local temporary directory that is removed right
after. Saving reads each mirrored variable's local copy and runs no
collective, so the non-chief write is only a discarded copy. Keras's own
`BackupAndRestore` is refused at `fit` start with the name of the drop-in.

The swapped class keeps the original `__name__`, `__module__` and
`__qualname__`, so a saved `.keras` file names the original class and
loads as a plain Keras model.
"""

from __future__ import annotations

from tfdist_opt import _class_swap

import gc
import logging
import os
import shutil
import tempfile

from tfdist_opt.strategy import topology

log = logging.getLogger(__name__)
_LOGGED = []

BACKUP_MESSAGE = (
    "keras.callbacks.BackupAndRestore is not chief-aware under tfdist_opt's "
    "multi-worker strategy: every worker would write the same backup files on "
    "shared storage. Use the drop-in tfdist_opt.DistributedBackupAndRestore"
    "(backup_dir=...) instead (backup_dir and save_freq mean the same). "
    "Received: callbacks containing {callback!r} (backup_dir={backup_dir!r}).")


def _is_chief(strategy) -> bool:
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return True
    spec = resolver.cluster_spec().as_dict()
    return topology.is_chief(resolver.task_type, resolver.task_id,
                             bool(spec.get("chief")))


def _write(model, method, filepath, args, kwargs):
    if _is_chief(model._distribute_strategy):
        return method(filepath, *args, **kwargs)
    tmp = tempfile.mkdtemp(prefix="tfdist_opt_nonchief_")
    if not _LOGGED:
        _LOGGED.append(True)
        log.info("tfdist_opt: non-chief worker writes model saves to a temporary "
                 "directory it removes; only the chief writes %s", filepath)
    try:
        return method(os.path.join(tmp, os.path.basename(os.fspath(filepath))),
                      *args, **kwargs)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


class ChiefSaving:
    """Mixin in front of a Keras Model class; see the module docstring."""

    _tfdist_chief_saving = True

    def save(self, filepath, *args, **kwargs):
        return _write(self, super().save, filepath, args, kwargs)

    def save_weights(self, filepath, *args, **kwargs):
        return _write(self, super().save_weights, filepath, args, kwargs)

    def fit(self, *args, **kwargs):
        import keras
        callbacks = kwargs.get("callbacks")
        if callbacks is None and len(args) > 5:
            callbacks = args[5]  # fit(x, y, batch_size, epochs, verbose, callbacks, ...)
        for cb in callbacks or ():
            if isinstance(cb, keras.callbacks.BackupAndRestore):
                raise ValueError(BACKUP_MESSAGE.format(
                    callback=cb, backup_dir=getattr(cb, "backup_dir", None)))
        return super().fit(*args, **kwargs)


def saving_class(cls: type) -> type:
    """The cached `ChiefSaving` subclass of Keras model class `cls`."""
    return _class_swap.cached_subclass(ChiefSaving, cls)


def adopt_models(strategy) -> int:
    """Swaps the class of every Keras model built under `strategy`; returns how many."""
    import keras
    import tensorflow as tf
    if tf.inside_function():
        return 0
    n = 0
    for obj in gc.get_objects():
        if (isinstance(obj, keras.Model)
                and not isinstance(obj, ChiefSaving)
                and getattr(obj, "_distribute_strategy", None) is strategy):
            obj.__class__ = saving_class(type(obj))
            n += 1
    return n
