"""`DistributedBackupAndRestore`: chief-aware, atomic, mid-epoch fault tolerance."""

from __future__ import annotations

import math
import os
import time

from absl import logging
import keras
import tensorflow as tf

from tfdist_opt.stall import keras_binding as stall_binding
from tfdist_opt.strategy.saving import file_writers
from tfdist_opt.strategy import topology as topology_lib
from tfdist_opt.callbacks import _common
from tfdist_opt.callbacks import backup_io
from tfdist_opt.callbacks import backup_store as store_lib
from tfdist_opt.callbacks import preemption as preemption_lib
from tfdist_opt.callbacks import ray_checkpoints
from tfdist_opt.callbacks import restore_agreement
from tfdist_opt.callbacks.throughput import SKIPPING_ATTR

LATEST = store_lib.LATEST
BackupError = store_lib.BackupError
RestoreMismatchError = restore_agreement.RestoreMismatchError


class DistributedBackupAndRestore(keras.callbacks.Callback):
    """Backs up weights + optimizer state; resumes at the batch where a job died.

    What is saved: every `model.weights` variable and every optimizer
    variable (slots such as momentum, `iterations`, the learning rate), with
    `tf.train.Checkpoint`, plus the position (`epoch`, train calls done in
    that epoch, optimizer step) in a small JSON file.

    Who writes: every worker takes part in each save (reading distributed
    variables may need collectives), but into `backup_dir` writes one
    worker per storage that workers share (the first in cluster order; the
    chief when all share it), and every worker whose `backup_dir` is on
    storage it shares with nobody (a local disk) keeps its own complete
    copy (`tfdist_opt.strategy.saving.file_writers`, decided from evidence at
    `on_train_begin`; `StrategyConfig.storage_sharing` overrides it). Other
    workers write into a fresh `tempfile.mkdtemp()` directory that they
    delete right after. Every worker restores from its `backup_dir`.

    Store (`tfdist_opt.callbacks.backup_store`): a backup is written into
    `backup_dir/.staging-<step>`, sealed by a `manifest.json` (position, and
    size + SHA-256 of every file) written last, renamed to `backup-<step>`,
    and only then pointed at by `latest.json`. The newest `keep` verified
    backups are kept; a backup is deleted only once a verified newer one
    exists. On restore the backups are tried from the highest step down:
    one whose files do not match its manifest, or whose checkpoint cannot
    be read, is skipped with a warning naming the file and why, and the
    next older one is used; a broken or dangling `latest.json` is reported
    and ignored (it never causes a deletion). If backups exist but none is
    valid, `fit` raises `BackupError` instead of restarting from step 0.

    Before step 1: each writer checks that `backup_dir` is writable (others:
    their temp dir), and in a cluster every worker posts the step it
    restored and its directory to the coordination service; if any worker
    has a problem or the steps differ, every worker raises
    `RestoreMismatchError` with one line naming each worker's step and
    directory (e.g. each host was given its own `backup_dir`).

    NaN safety: no backup is written after a step whose `loss` is NaN/inf,
    and the backups is deleted at train end only when training
    finished with finite losses (unlike Keras's `BackupAndRestore` with
    `TerminateOnNaN`, keras-team/keras#21771).

    Mid-epoch resume: `on_train_begin` restores the state and sets the
    starting epoch; in the resumed epoch, the first `batch` train calls are
    replaced by calls that only draw their batches from the iterator (no
    training), so training continues at the batch after the last backup.
    This reproduces an uninterrupted run exactly when the input yields the
    same batches for the same (epoch, batch) in a fresh process: a finite
    dataset iterated once per epoch (no `steps_per_epoch` on a repeated
    dataset), unshuffled or shuffled with a seed and
    `reshuffle_each_iteration=False`, and a model without stateful
    randomness (dropout RNG state is not restored). Metric accumulators of
    the resumed epoch restart at the resume point.

    Preemption: with `preemption` on, a SIGTERM to any worker makes every
    worker save at the same train call (agreed through the coordination
    service; see `tfdist_opt.callbacks.preemption`), wait until all have
    saved, and raise `SystemExit(preemption_exit_code)`. The backup just
    written is the newest; a rerun (e.g. `tfdist-opt launch
    --max-restarts R`) resumes from it.

    Ray Train: in a Ray Train worker (`ray.train.get_context()` answers),
    each backup is also reported to Ray (`ray.train.report` on every worker,
    the checkpoint from world rank 0 only: one stored copy per backup), and
    `fit` restores from `ray.train.get_checkpoint()` when Ray has one (a
    restarted or resized worker group) unless `backup_dir` holds a newer
    backup (Ray registers a report only when its controller next polls the
    workers, every 2 s by default, so a worker killed right after a save
    can leave Ray one backup behind), else from `backup_dir`. No code
    changes: `FailureConfig(max_failures=N)` then resumes at the newest
    backup instead of step 0 (see `tfdist_opt.callbacks.ray_checkpoints`).

    Ordering: none required (it writes nothing into `logs`). It cannot be
    combined with `keras.callbacks.BackupAndRestore`.

    Args:
        backup_dir: str. Directory for backups (shared by all workers, or
            on each host's own disk).
        save_freq: `"epoch"` or int. Save at each epoch end, or also every
            this many train calls (batches when `steps_per_execution=1`).
            Defaults to `"epoch"`.
        delete_on_end: bool. Delete the backups when training finishes with
            finite losses. Defaults to `True`.
        preemption: `"auto"` or bool. Handle SIGTERM as a preemption notice
            during `fit`. `"auto"`: on in a multi-worker cluster (where TF
            would otherwise swallow SIGTERM), off in a single process.
            Defaults to `"auto"`.
        preemption_exit_code: int. Exit code after a preemption save.
            Defaults to `42` (`preemption.PREEMPTION_EXIT_CODE`).
        keep: int. Complete backups to keep (>= 1); with 2 a corrupt newest
            backup still leaves one to resume from. Defaults to `2`.

    Example:
        >>> cb = DistributedBackupAndRestore("/shared/run1/backup",  # doctest: +SKIP
        ...                                  save_freq=100)
        >>> model.fit(ds, epochs=10, callbacks=[cb])  # rerun after a crash
    """

    def __init__(
        self,
        backup_dir: str,
        save_freq="epoch",
        delete_on_end: bool = True,
        preemption="auto",
        preemption_exit_code: int = preemption_lib.PREEMPTION_EXIT_CODE,
        keep: int = store_lib.DEFAULT_KEEP,
    ):
        super().__init__()
        if not isinstance(backup_dir, (str, os.PathLike)) or not str(backup_dir):
            raise ValueError(
                "Invalid value for `backup_dir`: expected a "
                f"non-empty path. Received: backup_dir={backup_dir!r}"
            )
        if save_freq != "epoch" and (
            isinstance(save_freq, bool) or not isinstance(save_freq, int) or save_freq < 1
        ):
            raise ValueError(
                "Invalid value for `save_freq`: expected 'epoch' "
                f"or a positive int. Received: save_freq={save_freq!r}"
            )
        if not isinstance(delete_on_end, bool):
            raise TypeError(
                "Invalid value for `delete_on_end`: expected a bool. "
                f"Received: delete_on_end={delete_on_end!r}"
            )
        if preemption != "auto" and not isinstance(preemption, bool):
            raise ValueError(
                "Invalid value for `preemption`: expected 'auto' "
                f"or a bool. Received: preemption={preemption!r}"
            )
        if (
            isinstance(preemption_exit_code, bool)
            or not isinstance(preemption_exit_code, int)
            or not 1 <= preemption_exit_code <= 255
        ):
            raise ValueError(
                "Invalid value for `preemption_exit_code`: expected "
                "an int in [1, 255]. Received: "
                f"preemption_exit_code={preemption_exit_code!r}"
            )
        if isinstance(keep, bool) or not isinstance(keep, int) or keep < 1:
            raise ValueError(
                f"Invalid value for `keep`: expected an int >= 1. Received: keep={keep!r}"
            )
        self.keep = keep
        self.backup_dir = os.fspath(backup_dir)
        self.preemption = preemption
        self.preemption_exit_code = preemption_exit_code
        self.save_freq = save_freq
        self.delete_on_end = delete_on_end
        self._after_write = None  # test hook: called between write and commit
        self._reset()

    def _reset(self):
        self._writes = True
        self._checkpoint = None
        self._epoch = 0
        self._calls_in_epoch = 0
        self._resume_epoch = None
        self._resume_calls = 0
        self._to_skip = 0
        self._real_train_function = None
        self._saw_nonfinite = False
        self._completed = False
        self._restored = None
        self._skipped = []
        self._train_calls = 0
        self._agreement = None
        self._ray = None
        self._last_loss = None

    # ------------------------------------------------------------- hooks
    def on_train_begin(self, logs=None):
        _common.check_fit_order(self.model)
        self._reset()
        self._writes = file_writers.is_writer(
            getattr(self.model, "distribute_strategy", None), self.backup_dir
        )
        self._ray = ray_checkpoints.train_context()
        optimizer = self.model.optimizer
        if not optimizer.built:
            optimizer.build(self.model.trainable_variables)
        self._checkpoint = tf.train.Checkpoint(
            weights=list(self.model.weights), optimizer=list(optimizer.variables)
        )
        exc = meta = None
        try:
            self._prepare_dirs()
            meta = self._restore()
        except (OSError, BackupError) as e:
            exc = e
        restore_agreement.agree_or_raise(meta, exc, self.backup_dir)
        if meta is not None:
            self._restored = meta
            self._resume_epoch = meta["epoch"]
            self._resume_calls = meta["calls"]
            self.model._initial_epoch = meta["epoch"]  # pylint: disable=protected-access
        self._agreement = self._make_agreement()
        if self._agreement is not None:
            self._agreement.start()

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        self._calls_in_epoch = 0
        self._to_skip = self._resume_calls if epoch == self._resume_epoch else 0

    def on_train_batch_begin(self, batch, logs=None):
        # The skipping flag changes only here, so every callback sees the same
        # value from this batch's begin to its end, whatever the list order.
        if self._to_skip == 0:
            self._stop_skipping()
        elif self._real_train_function is None:
            self._real_train_function = self.model.train_function
            spe = int(getattr(self.model, "steps_per_execution", 1) or 1)

            def skip_batches(iterator):
                for _ in range(spe):
                    next(iterator)
                return {}

            self.model.train_function = skip_batches
            setattr(self.model, SKIPPING_ATTR, True)

    def on_train_batch_end(self, batch, logs=None):
        self._calls_in_epoch += 1
        if self._real_train_function is not None:
            self._to_skip -= 1
            return
        self._train_calls += 1
        # The loss read below also waits for the step to finish, so the
        # preemption check never runs ahead of the step it counts.
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(loss):
            self._saw_nonfinite = True
        self._last_loss = loss
        preempted = self._agreement is not None and self._agreement.check(self._train_calls)
        if not self._saw_nonfinite and (
            preempted or (self.save_freq != "epoch" and self._calls_in_epoch % self.save_freq == 0)
        ):
            self._save(self._epoch, self._calls_in_epoch)
        if preempted:
            self._exit_preempted()

    def on_epoch_end(self, epoch, logs=None):
        self._stop_skipping()
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(loss):
            self._saw_nonfinite = True
        if not self._saw_nonfinite:
            self._save(epoch + 1, 0)
        if epoch + 1 >= (self.params or {}).get("epochs", epoch + 1):
            self._completed = True

    def on_train_end(self, logs=None):
        self._stop_skipping()
        if self._agreement is not None:
            self._agreement.stop()
            self._agreement = None
        self.model._initial_epoch = None  # pylint: disable=protected-access
        finished = self._completed or self.model.stop_training
        if self.delete_on_end and finished and not self._saw_nonfinite and self._writes:
            delete_backups(self.backup_dir)

    # ------------------------------------------------------- internals
    @property
    def restored(self) -> dict | None:
        """The metadata of the backup restored by the last `fit`, or None."""
        return self._restored

    @property
    def skipped(self) -> list:
        """Why the last `fit` passed over newer backups (one line each)."""
        return list(self._skipped)

    def _prepare_dirs(self) -> None:
        backup_io.prepare_dirs(self.backup_dir, self._writes)

    def _restore(self) -> dict | None:
        """Reads the newest valid backup into the model; None if there is none."""
        meta, self._skipped = backup_io.restore(self._checkpoint, self.backup_dir, self._ray)
        return meta

    def _make_agreement(self):
        topo = topology_lib.detect_topology(gpus=())
        if self.preemption is False or (self.preemption == "auto" and not topo.is_multi_worker):
            return None
        tasks = preemption_lib.task_names(topo.tf_config)
        store = preemption_lib.TFKeyValueStore() if len(tasks) > 1 else None
        return preemption_lib.PreemptionAgreement(
            _common.task_tag(), tasks, store, preemption_lib.next_fit_namespace()
        )

    def _exit_preempted(self):
        """All workers have saved at the agreed call: exit for a restart."""
        agreement, self._agreement = self._agreement, None
        agreement.finish()
        self._stop_skipping()
        # Multi-worker: keep our handler, so the launcher's SIGTERM to the
        # others (sent when the first worker exits) only sets a flag.
        agreement.stop(restore_handler=not agreement.multi_worker)
        waited = (
            time.monotonic() - agreement.signal_time
            if (agreement.signal_time is not None)
            else None
        )
        message = (
            f"tfdist_opt: preempted; {_common.task_tag()} saved at step "
            f"{_common.complete_step(self.model)} (train call "
            f"{self._train_calls} of this fit"
            + (f", {waited:.2f} s after its SIGTERM" if waited is not None else "")
            + f"); exiting with code {self.preemption_exit_code}"
        )
        logging.warning(message)
        raise SystemExit(self.preemption_exit_code)

    def _stop_skipping(self):
        if self._real_train_function is not None:
            self.model.train_function = self._real_train_function
            self._real_train_function = None
        if hasattr(self.model, SKIPPING_ATTR):
            delattr(self.model, SKIPPING_ATTR)

    def _save(self, epoch: int, calls: int) -> None:
        with stall_binding.saving():  # the stall inspector's `saving` phase
            self._save_unlabelled(epoch, calls)

    def _save_unlabelled(self, epoch: int, calls: int) -> None:
        step = _common.complete_step(self.model)
        meta = {"name": f"{store_lib.PREFIX}{step}", "epoch": epoch, "calls": calls, "step": step}
        final = backup_io.write(
            self._checkpoint, self.backup_dir, self._writes, meta, self.keep, self._after_write
        )
        if self._ray is not None:  # every worker: Ray's report is a barrier
            loss = self._last_loss
            ray_checkpoints.report(
                self._ray, meta, final, None if loss is None else {"loss": float(loss)}
            )


def read_latest(backup_dir: str) -> dict | None:
    """What `latest.json` in `backup_dir` points at, or None (absent or broken)."""
    return store_lib.read_pointer(backup_dir)[0]


def delete_backups(backup_dir: str) -> None:
    """Removes the backups and `latest.json` (the directory itself stays)."""
    store_lib.delete_all(backup_dir)
