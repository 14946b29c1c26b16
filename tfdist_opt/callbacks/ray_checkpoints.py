"""Backups as Ray Train checkpoints: report each one, restore from Ray's.

Under a Ray Train worker (Ray's public `ray.train.get_context()` answers),
`DistributedBackupAndRestore` also hands each committed backup to Ray:

- every worker calls `ray.train.report(metrics, checkpoint=...)` once per
  backup (Ray Train V2 requires the same number of reports on every worker
  and treats each call as a barrier); only world rank 0 passes the
  checkpoint (its committed `backup-<step>` directory), so Ray stores one
  copy per backup, not one per worker;
- on a restart (Ray's `FailureConfig`, or an elastic resize) every worker
  restores from `ray.train.get_checkpoint()`, the newest backup Ray
  stored, which is the same for every worker whatever each node's local
  `backup_dir` holds.

Ray is imported only when this process already has it loaded (a Ray
worker always has), so nothing here costs an import outside Ray.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Iterator


def train_context():
    """Ray Train's context in a Ray Train worker; None anywhere else."""
    if "ray" not in sys.modules:
        return None
    try:
        from ray import train  # pylint: disable=g-import-not-at-top

        return train.get_context()
    except Exception:  # pylint: disable=broad-except
        return None  # not a Ray Train worker (driver, task, Tune, old Ray)


def world_rank(context) -> int:
    """This worker's world rank."""
    return int(context.get_world_rank())


def report(context, meta: dict, path: str | None, metrics: dict | None = None) -> None:
    """Reports one backup to Ray (checkpoint from world rank 0 only).

    Args:
        context: Ray Train's context (`train_context()`).
        meta: dict. The backup's position (`epoch`, `calls`, `step`).
        path: str or None. The committed backup directory, if this worker
            wrote one.
        metrics: dict or None. Extra scalars (e.g. the last loss).
    """
    from ray import train  # pylint: disable=g-import-not-at-top

    values = {k: meta[k] for k in ("epoch", "calls", "step")}
    values.update(metrics or {})
    checkpoint = (
        train.Checkpoint.from_directory(path)
        if path is not None and world_rank(context) == 0
        else None
    )
    train.report(values, checkpoint=checkpoint)


@contextlib.contextmanager
def latest_checkpoint() -> Iterator[str | None]:
    """A local directory holding Ray's newest checkpoint, or None."""
    from ray import train  # pylint: disable=g-import-not-at-top

    checkpoint = train.get_checkpoint()
    if checkpoint is None:
        yield None
        return
    with checkpoint.as_directory() as directory:
        yield directory
