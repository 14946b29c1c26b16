"""Storage-aware Keras 3 file-writing callbacks under our multi-worker strategy.

Keras 3's `ModelCheckpoint`, `BackupAndRestore`, `CSVLogger` and
`TensorBoard` write the same paths from every worker. On shared storage
(one host, NFS) that fails:
`ModelCheckpoint` and `BackupAndRestore` create their directory with
`os.makedirs` (no `exist_ok`: `FileExistsError` when two workers race), two
writers lock the same `.h5` (`BlockingIOError: unable to lock file`), and
`BackupAndRestore.on_train_end` has every worker `rmtree` the one backup
directory; `TensorBoard` writes one set of event files per worker into one
folder. With only the chief writing, a worker on its own local disk has no
checkpoint afterwards (issue 23). tf_keras gave non-chief workers temporary
paths (issue 17), which has the same per-host gap.

`fit` of a model built in `KerasMultiWorkerMirroredStrategy.scope()`
(`chief_saving.ChiefSaving.fit`) passes its callbacks to `adopt`, which
swaps the class of each such callback *instance* to a cached subclass
(`_class_swap.cached_subclass`; the callback keeps its name and
`isinstance` checks). No Keras class is modified. Each asks
`file_writers` who writes its directory (one writer per storage that
workers share; every worker on storage it shares with nobody). What the
subclasses do on a worker that does not write:

- `ModelCheckpoint`: saves to the same file name in a fresh temporary
  directory it removes right after (each worker still runs the same save),
  then waits until its writer has finished the real file.
- `BackupAndRestore`: restores read-only from `backup_dir` (the writer's
  files); never writes, copies (`double_checkpoint`) or deletes it. Before
  the first step the workers compare the epoch each restored (through the
  coordination service); if they differ, or one could not read its backup,
  every worker raises `RestoreMismatchError` naming each worker's epoch and
  directory.
- `CSVLogger`: writes to a temporary file removed as soon as it is open.
- `TensorBoard`: creates no writer; every hook returns at once
  (`summaries.ChiefOnlyTensorBoard`, the mixin our `ChiefTensorBoard` is
  made of, with the writer rule instead of the chief rule).
"""

from __future__ import annotations

import logging
import os
import shutil

from tfdist_opt import _class_swap
from tfdist_opt import private_api
from tfdist_opt import runtime
from tfdist_opt.callbacks import restore_agreement
from tfdist_opt.callbacks.summaries import ChiefOnlyTensorBoard
from tfdist_opt.strategy.saving import file_writers

log = logging.getLogger(__name__)
_LOGGED: set = set()


def _strategy(callback):
    return callback.model.distribute_strategy


def _writes(callback, directory) -> bool:
    return file_writers.is_writer(_strategy(callback), directory)


def _log_once(name: str, what: str) -> None:
    if name not in _LOGGED:
        _LOGGED.add(name)
        log.info("tfdist_opt: keras.callbacks.%s made storage-aware: %s", name, what)


class ChiefModelCheckpoint:
    """Mixin in front of `keras.callbacks.ModelCheckpoint`."""

    def _save_model(self, epoch, batch, logs):
        real = self.filepath
        directory = os.path.dirname(os.path.abspath(os.fspath(real)))
        with file_writers.write_scope(
            _strategy(self), directory, barrier=True, prefix="tfdist_opt_nonwriter_ckpt_"
        ) as tmp:
            if tmp is None:
                return super()._save_model(epoch, batch, logs)
            # Keep the file name (a format template, and the .keras/.h5 suffix
            # that picks the format); drop the real directory.
            self.filepath = os.path.join(tmp, "ckpt", os.path.basename(real))
            try:
                return super()._save_model(epoch, batch, logs)
            finally:
                self.filepath = real


def _decided_writes(callback) -> bool:
    """What `on_train_begin` decided (True before it ran)."""
    state = runtime.OBJECTS.get(callback)
    return True if state is None or state.writes is None else state.writes


class ChiefBackupAndRestore:
    """Mixin in front of `keras.callbacks.BackupAndRestore`."""

    def on_train_begin(self, logs=None):
        error = None
        try:
            writes = runtime.OBJECTS.of(self).writes = _writes(self, self.backup_dir)
            if writes:
                super().on_train_begin(logs)
            else:
                self._load_read_only()
        except Exception as e:  # pylint: disable=broad-except
            error = e
        epoch = self.model._initial_epoch or 0
        meta = {"step": epoch, "name": f"epoch {epoch}"} if epoch else None
        restore_agreement.agree_or_raise(meta, error, self.backup_dir)

    def _load_read_only(self):
        """Keras's fallback to the `.bkp` copy, without copying in the shared dir."""
        try:
            self._load_model()
        except OSError:
            if not private_api.file_exists(self._prev_weights_path):
                raise
            # Keras loads only `*.weights.h5` names: read a private copy.
            paths = (self._weights_path, self._training_metadata_path)
            with file_writers.scratch_dir("tfdist_opt_nonwriter_backup_") as tmp:
                self._weights_path = os.path.join(tmp, "latest.weights.h5")
                shutil.copyfile(self._prev_weights_path, self._weights_path)
                self._training_metadata_path = self._prev_training_metadata_path
                try:
                    self._load_model()
                finally:
                    self._weights_path, self._training_metadata_path = paths

    def _save_model(self):
        # Saving reads each mirrored variable's local copy; no collective is
        # skipped by writing nothing here.
        if _decided_writes(self):
            # Its model.save_weights must not start a save of its own (with
            # a barrier the other workers of the group never join).
            with file_writers.write_scope(_strategy(self), self.backup_dir):
                super()._save_model()

    def on_train_end(self, logs=None):
        if _decided_writes(self):
            super().on_train_end(logs)


class ChiefCSVLogger:
    """Mixin in front of `keras.callbacks.CSVLogger`."""

    def on_train_begin(self, logs=None):
        real = self.filename
        directory = os.path.dirname(os.path.abspath(os.fspath(real)))
        # The open file outlives its directory (POSIX): nothing is left
        # behind, even when the worker dies before on_train_end.
        with file_writers.write_scope(
            _strategy(self), directory, prefix="tfdist_opt_nonwriter_csv_"
        ) as tmp:
            if tmp is None:
                return super().on_train_begin(logs)
            self.filename = os.path.join(tmp, os.path.basename(real))
            try:
                return super().on_train_begin(logs)
            finally:
                self.filename = real


class WriterTensorBoard(ChiefOnlyTensorBoard):
    """Mixin in front of `keras.callbacks.TensorBoard`: writes where this
    worker is the writer of `log_dir` (`file_writers`)."""

    def _decide_writes(self, model) -> bool:
        return file_writers.is_writer(
            getattr(model, "distribute_strategy", None), os.fspath(self.log_dir)
        )


def _mixins():
    import keras

    return (
        (
            keras.callbacks.ModelCheckpoint,
            ChiefModelCheckpoint,
            "one writer per shared storage, others a temporary copy",
        ),
        (
            keras.callbacks.BackupAndRestore,
            ChiefBackupAndRestore,
            "every worker restores from backup_dir, one writer per shared storage",
        ),
        (
            keras.callbacks.CSVLogger,
            ChiefCSVLogger,
            "one writer per shared storage, others a temporary copy",
        ),
        (
            keras.callbacks.TensorBoard,
            WriterTensorBoard,
            "one writer of event files per shared storage",
        ),
    )


def adopt(callbacks) -> int:
    """Swaps the class of every Keras file-writing callback in `callbacks`.

    `callbacks`: a list, a `keras.callbacks.CallbackList`, or None. Returns
    how many were swapped now (already-swapped ones are not counted).
    """
    items = getattr(callbacks, "callbacks", callbacks) or ()
    n = 0
    for cb in items:
        for base, mixin, what in _mixins():
            # Our own ChiefTensorBoard stays chief-only: it says so by name.
            done = ChiefOnlyTensorBoard if mixin is WriterTensorBoard else mixin
            if isinstance(cb, base) and not isinstance(cb, done):
                cb.__class__ = _class_swap.cached_subclass(mixin, type(cb))
                _log_once(base.__name__, what)
                n += 1
    return n
