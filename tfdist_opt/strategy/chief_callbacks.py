"""Chief-aware Keras 3 file-writing callbacks under our multi-worker strategy.

Keras 3's `ModelCheckpoint`, `BackupAndRestore`, `CSVLogger` and
`TensorBoard` write the same paths from every worker. On shared storage
(one host, NFS) that fails:
`ModelCheckpoint` and `BackupAndRestore` create their directory with
`os.makedirs` (no `exist_ok`: `FileExistsError` when two workers race), two
writers lock the same `.h5` (`BlockingIOError: unable to lock file`), and
`BackupAndRestore.on_train_end` has every worker `rmtree` the one backup
directory; `TensorBoard` writes one set of event files per worker into one
folder. tf_keras gave non-chief workers temporary paths (issue 17).

`fit` of a model built in `KerasMultiWorkerMirroredStrategy.scope()`
(`chief_saving.ChiefSaving.fit`) passes its callbacks to `adopt`, which
swaps the class of each such callback *instance* to a cached subclass
(`_class_swap.cached_subclass`; the callback keeps its name and
`isinstance` checks). No Keras class is modified. What the subclasses do:

- `ModelCheckpoint`: the chief saves to the real path; another worker saves
  to the same file name in a fresh temporary directory it removes right
  after (each worker still runs the same save, so any variable read that
  needs a collective stays matched).
- `BackupAndRestore`: every worker restores from `backup_dir` (so it must
  be storage all workers see); only the chief writes, copies
  (`double_checkpoint`) and deletes it (`delete_checkpoint`). Before the
  first step the workers compare the epoch each restored (through the
  coordination service); if they differ (e.g. each host had its own
  `backup_dir`), or one could not read its backup, every worker raises
  `RestoreMismatchError` naming each worker's epoch and directory.
- `CSVLogger`: the chief writes the file; the others write to a temporary
  file removed as soon as it is open.
- `TensorBoard`: the chief writes the event files; on the others every hook
  returns at once (`summaries.ChiefOnlyTensorBoard`, the mixin our
  `ChiefTensorBoard` is made of, so that one is left as it is).
"""

from __future__ import annotations

import logging
import os
import shutil

from tfdist_opt import _class_swap
from tfdist_opt.strategy import topology
from tfdist_opt.strategy.chief_saving import scratch_dir

log = logging.getLogger(__name__)
_LOGGED: set = set()


def _is_chief(callback) -> bool:
    return topology.strategy_is_chief(callback.model.distribute_strategy)


def _log_once(name: str, what: str) -> None:
    if name not in _LOGGED:
        _LOGGED.add(name)
        log.info("tfdist_opt: keras.callbacks.%s made chief-aware: %s", name, what)


class ChiefModelCheckpoint:
    """Mixin in front of `keras.callbacks.ModelCheckpoint`."""

    def _save_model(self, epoch, batch, logs):
        if _is_chief(self):
            return super()._save_model(epoch, batch, logs)
        real = self.filepath
        with scratch_dir("tfdist_opt_nonchief_ckpt_") as tmp:
            # Keep the file name (a format template, and the .keras/.h5 suffix
            # that picks the format); drop the shared directory.
            self.filepath = os.path.join(tmp, "ckpt", os.path.basename(real))
            try:
                return super()._save_model(epoch, batch, logs)
            finally:
                self.filepath = real


class ChiefBackupAndRestore:
    """Mixin in front of `keras.callbacks.BackupAndRestore`."""

    def on_train_begin(self, logs=None):
        from tfdist_opt.callbacks import restore_agreement
        error = None
        try:
            if _is_chief(self):
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
        from keras.src.utils import file_utils
        try:
            self._load_model()
        except OSError:
            if not file_utils.exists(self._prev_weights_path):
                raise
            # Keras loads only `*.weights.h5` names: read a private copy.
            paths = (self._weights_path, self._training_metadata_path)
            with scratch_dir("tfdist_opt_nonchief_backup_") as tmp:
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
        if _is_chief(self):
            super()._save_model()

    def on_train_end(self, logs=None):
        if _is_chief(self):
            super().on_train_end(logs)


class ChiefCSVLogger:
    """Mixin in front of `keras.callbacks.CSVLogger`."""

    def on_train_begin(self, logs=None):
        if _is_chief(self):
            return super().on_train_begin(logs)
        real = self.filename
        # The open file outlives its directory (POSIX): nothing is left
        # behind, even when the worker dies before on_train_end.
        with scratch_dir("tfdist_opt_nonchief_csv_") as tmp:
            self.filename = os.path.join(tmp, os.path.basename(real))
            try:
                return super().on_train_begin(logs)
            finally:
                self.filename = real


def _mixins():
    import keras
    from tfdist_opt.callbacks.summaries import ChiefOnlyTensorBoard
    return (
        (keras.callbacks.ModelCheckpoint, ChiefModelCheckpoint,
         "only the chief writes the real path, others a temporary copy"),
        (keras.callbacks.BackupAndRestore, ChiefBackupAndRestore,
         "every worker restores from backup_dir, only the chief writes it"),
        (keras.callbacks.CSVLogger, ChiefCSVLogger,
         "only the chief writes the file, others a temporary copy"),
        (keras.callbacks.TensorBoard, ChiefOnlyTensorBoard,
         "only the chief writes event files"),
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
            if isinstance(cb, base) and not isinstance(cb, mixin):
                cb.__class__ = _class_swap.cached_subclass(mixin, type(cb))
                _log_once(base.__name__, what)
                n += 1
    return n
