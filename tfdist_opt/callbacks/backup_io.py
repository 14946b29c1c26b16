"""Where `DistributedBackupAndRestore` writes a backup and reads one back.

A worker that writes into `backup_dir` (`file_writers.is_writer`) stages
each backup there and commits it (`backup_store.commit`); every other
worker still takes part in the save (reading distributed variables may
need collectives) but writes into a fresh temp directory it deletes right
after. A restore reads Ray Train's newest checkpoint when Ray has one that
is not older than `backup_dir`'s newest backup, else the newest valid
backup in `backup_dir`.
"""

from __future__ import annotations

import glob
import os
import shutil
import tempfile

import tensorflow as tf

from tfdist_opt.callbacks import _common
from tfdist_opt.callbacks import backup_store as store_lib
from tfdist_opt.callbacks import ray_checkpoints


def _task_prefix() -> str:
    """The prefix of this task's temp directories, in any process."""
    return f"tfdist_opt_backup_{_common.task_tag()}_"


def _temp_prefix() -> str:
    """The prefix of this process's temp directories (non-writers' saves).

    The process id in the name tells a leftover of a killed process from
    the live save of another job's task with the same name on this host
    (jobs share the temporary directory).
    """
    return f"{_task_prefix()}{os.getpid()}_"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def prepare_dirs(backup_dir: str, writes: bool) -> None:
    """Writable check + leftovers of killed saves, before any step."""
    if writes:
        store_lib.check_writable(backup_dir)
        store_lib.remove_staging(backup_dir)
        return
    # Temp dirs of this task's name left by a process killed mid-save; a
    # live process's directory (another job's task of the same name) stays.
    prefix = _task_prefix()
    for leftover in glob.glob(os.path.join(tempfile.gettempdir(), prefix + "*")):
        pid = os.path.basename(leftover)[len(prefix) :].split("_", 1)[0]
        if pid.isdigit() and _alive(int(pid)) and int(pid) != os.getpid():
            continue
        shutil.rmtree(leftover, ignore_errors=True)
    store_lib.check_writable(tempfile.gettempdir())


def restore(checkpoint: tf.train.Checkpoint, backup_dir: str, ray) -> tuple[dict | None, list]:
    """Reads the newest valid backup into `checkpoint`.

    Args:
        checkpoint: `tf.train.Checkpoint`. What a backup restores into.
        backup_dir: str. The callback's directory.
        ray: the Ray Train context (`ray_checkpoints.train_context()`), or
            None outside Ray Train.

    Returns:
        (the restored backup's metadata or None if there is none, why newer
        backups were passed over: one line each).

    Raises:
        BackupError: Ray's newest checkpoint, or every backup in
            `backup_dir`, cannot be restored.
    """

    def read(path):
        checkpoint.read(os.path.join(path, "state")).assert_consumed()

    if ray is not None:
        with ray_checkpoints.latest_checkpoint() as directory:
            if directory is not None:
                meta, why = store_lib.verify(directory)
                if meta is None:
                    raise store_lib.BackupError(
                        f"Ray's newest checkpoint cannot be restored: {why}"
                    )
                local = store_lib.find_restorable(backup_dir).meta
                # Ray registers a report when its controller next polls
                # (every 2 s): a backup_dir may hold a newer one.
                if local is None or local["step"] <= meta["step"]:
                    read(directory)
                    return meta, []
    return store_lib.restore_newest(
        backup_dir, read, (tf.errors.OpError, AssertionError, ValueError)
    )


def write(
    checkpoint: tf.train.Checkpoint,
    backup_dir: str,
    writes: bool,
    meta: dict,
    keep: int,
    after_manifest=None,
) -> str | None:
    """Saves `checkpoint` as the backup `meta` describes.

    Every worker writes the checkpoint (all take part in reading distributed
    variables); a writer commits it into `backup_dir`, keeping `keep`
    backups, the others delete their temp copy.

    Returns:
        The committed backup's directory (writers), or None.
    """
    step = meta["step"]
    if writes:
        staging = os.path.join(backup_dir, f"{store_lib.STAGING}{step}")
        if os.path.exists(staging):
            shutil.rmtree(staging)
    else:
        staging = tempfile.mkdtemp(prefix=_temp_prefix())
    try:
        checkpoint.write(os.path.join(staging, "state"))
    finally:
        if not writes:
            shutil.rmtree(staging, ignore_errors=True)
    if not writes:
        return None
    return store_lib.commit(backup_dir, staging, meta, keep=keep, after_manifest=after_manifest)
