"""Who writes a file under a multi-worker strategy: one decision per directory.

Every saving route of a model built in our strategy's scope (`model.save`,
`save_weights`, `export`, Keras's `ModelCheckpoint`, `BackupAndRestore`,
`CSVLogger`, `TensorBoard`) and our `DistributedBackupAndRestore` ask this
module whether this worker writes a directory. The answer comes from the
strategy's `storage_sharing` setting (`StrategyConfig.storage_sharing`):

- `"auto"` (default): a probe with every worker (`storage_sharing.probe`):
  workers that see each other's token files share the storage; the first
  of each group writes for the group, a worker with a private disk writes
  its own complete copy. Once per directory per process (cached by its
  absolute path), a few key-value round trips.
- `"shared"`: every worker sees the same storage, only the chief writes
  (no probe).
- `"per_worker"`: no worker shares, each writes its own copy (no probe).

A worker that does not write runs the same save into a fresh temporary
directory it removes (each worker runs the same code; saving a Keras model
reads each variable's local copy and runs no collective). With
`barrier=True`, it then waits until its group's writer has finished the
real file (or raises the writer's error), so code that reads the file right
after the save (`load_model` after `save`, `tf.train.latest_checkpoint`
after `fit`) sees it complete on every worker.

Rules the probe and the barrier rely on (as in Keras's and TensorFlow's
multi-worker guides): every worker runs the same saves in the same order.
Without a cluster, or under a parameter-server strategy (only the
coordinator runs `fit` and saves), or on a `scheme://` path (object
storage, shared by nature), the chief rule applies without a probe.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from typing import Iterator, NamedTuple

from absl import logging

from tfdist_opt import runtime
from tfdist_opt.coordination import kv_store
from tfdist_opt.strategy.saving import storage_sharing
from tfdist_opt.strategy import topology

_PREFIX = "tfdist_opt/storage"
_LOCK = threading.Lock()
_CACHE: dict[tuple[str, str], storage_sharing.Layout] = {}
_SEQ = {"probe": 0, "saved": 0}
_STORE = []
_WARNED: set = set()
_NESTED = threading.local()
# How long a worker waits for its group's writer to finish a save.
BARRIER_TIMEOUT_S = 600.0


def attach(strategy, mode: str) -> None:
    """Records `storage_sharing` on `strategy` (set by `opt_strategy`)."""
    if mode not in storage_sharing.MODES:
        raise ValueError(
            "Invalid value for `storage_sharing`: expected one of "
            f"{storage_sharing.MODES}. Received: storage_sharing={mode!r}"
        )
    runtime.runtime_of(strategy).storage_sharing = mode


def _store():
    if not _STORE:
        _STORE.append(kv_store.TFKeyValueStore())
    return _STORE[0]


def _next(kind: str) -> str:
    with _LOCK:
        _SEQ[kind] += 1
        return f"{_PREFIX}/{kind}/{_SEQ[kind]}"


def _cluster(strategy):
    """(me, tasks, by_probe) for `strategy`, or None when no other worker saves.

    None: one process, a task outside the training cluster, or a
    parameter-server cluster (only the coordinator runs `fit` and saves).
    `by_probe` is False when the cluster comes from TF_CONFIG for a model
    built outside any multi-worker strategy (then the chief rule applies:
    there may be no coordination service to probe with).
    """
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is not None and resolver.task_type:
        spec = resolver.cluster_spec().as_dict()
        me, by_probe = f"{resolver.task_type}_{resolver.task_id}", True
    else:
        topo = topology.detect_topology(gpus=())
        if not topo.is_multi_worker:
            return None
        spec = topo.tf_config["cluster"]
        me, by_probe = f"{topo.task_type}_{topo.task_index}", False
    tasks = [
        f"{role}_{i}" for role in ("chief", "worker") for i in range(len(spec.get(role) or ()))
    ]
    if len(tasks) < 2 or me not in tasks or spec.get("ps"):
        return None
    return me, tasks, by_probe


class Decision(NamedTuple):
    """This task's place in a directory's `Layout`.

    Attributes:
        me: str. This task (`worker_1`).
        layout: `storage_sharing.Layout`.
        synced: bool. The workers can talk (coordination service), so a
            save can end with a barrier.
    """

    me: str
    layout: storage_sharing.Layout
    synced: bool

    @property
    def writes(self) -> bool:
        return self.layout.is_writer(self.me)


def decide(strategy, directory) -> Decision | None:
    """Who writes `directory` (None: no other worker saves, so this one writes)."""
    cluster = _cluster(strategy)
    if cluster is None:
        return None
    me, tasks, by_probe = cluster
    state = runtime.peek(strategy)
    mode = "auto" if state is None else state.storage_sharing
    path = os.fspath(directory)
    if mode == "per_worker":
        return Decision(
            me, storage_sharing.private_layout(tasks, "storage_sharing='per_worker'"), by_probe
        )
    if mode == "shared" or not by_probe or "://" in path:
        why = (
            "storage_sharing='shared'"
            if mode == "shared"
            else "object storage"
            if "://" in path
            else "model outside a multi-worker strategy: chief rule"
        )
        return Decision(me, storage_sharing.shared_layout(tasks, why), by_probe)
    key = (mode, os.path.abspath(path))
    with _LOCK:
        cached = _CACHE.get(key)
    if cached is not None:
        return Decision(me, cached, True)
    try:
        found, missing = storage_sharing.probe(path, me, tasks, _store(), _next("probe"))
    except Exception as e:  # pylint: disable=broad-except
        # No coordination service (a strategy without one): the chief rule.
        _warn_once(
            "no-kv",
            "tfdist_opt: could not probe which workers share "
            f"{path} ({type(e).__name__}: {str(e)[:200]}); only the chief "
            "writes (set storage_sharing to 'shared' or 'per_worker' to say)",
        )
        return Decision(
            me, storage_sharing.shared_layout(tasks, "no probe possible: chief rule"), False
        )
    if missing:
        _warn_once(
            key,
            f"tfdist_opt: {', '.join(missing)} did not take part in "
            f"the storage probe of {path} within "
            f"{storage_sharing.DEFAULT_TIMEOUT_S:g} s; treated as not sharing it. "
            "Every worker must run the same saves in the same order; code "
            "that saves on the chief only should set storage_sharing='shared'",
        )
    with _LOCK:
        _CACHE[key] = found
    logging.info("tfdist_opt: who writes %s: %s", key[1], found.describe())
    return Decision(me, found, True)


def is_writer(strategy, directory) -> bool:
    """True if this worker writes files into `directory`.

    Who writes is decided once per directory (`storage_sharing`): of the
    workers that share the storage, the first writes for them; a worker
    with a private disk writes its own copy; without a strategy that
    decides (one process), True. Use it for files of your own that every
    worker would otherwise write.

    Args:
        strategy: the model's `tf.distribute` strategy (or None).
        directory: str. Where the files go.

    Returns:
        bool. Whether this worker writes there.

    Example:
        >>> path = p if is_writer(strategy, p) else scratch  # doctest: +SKIP
    """
    found = decide(strategy, directory)
    return found is None or found.writes


@contextlib.contextmanager
def scratch_dir(prefix: str) -> Iterator[str]:
    """A fresh local temporary directory, removed on exit: where a worker
    that does not write a directory writes what its writer keeps."""
    tmp = tempfile.mkdtemp(prefix=prefix)
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def write_scope(
    strategy, directory: str, barrier: bool = False, prefix: str = "tfdist_opt_nonwriter_"
) -> Iterator[str | None]:
    """Yields None if this worker writes `directory`, else a scratch directory.

    Args:
        strategy: the model's `tf.distribute` strategy (or None).
        directory: str. Where the real files go.
        barrier: bool. On exit, the writer posts that it finished (or its
            error) and each other worker of its group waits for that, so
            every worker sees the complete file after the scope. Only for
            saves every worker runs. Defaults to `False`.
        prefix: str. Name prefix of the scratch directory.

    Raises:
        OSError: with `barrier`, on a non-writer whose writer failed.
    """
    if getattr(_NESTED, "depth", 0):
        # A save inside a save (ModelCheckpoint calls model.save): the outer
        # scope already decided, and may have pointed it at a scratch path.
        yield None
        return
    _NESTED.depth = 1
    try:
        with _write_scope(strategy, directory, barrier, prefix) as where:
            yield where
    finally:
        _NESTED.depth = 0


@contextlib.contextmanager
def _write_scope(strategy, directory, barrier, prefix):
    found = decide(strategy, directory)
    waits = (
        barrier and found is not None and found.synced and len(found.layout.group_of(found.me)) > 1
    )
    key = _next("saved") if barrier and found is not None and found.synced else None
    if found is None or found.writes:
        error = None
        try:
            yield None
        except BaseException as e:
            error = f"{type(e).__name__}: {e}"
            raise
        finally:
            if waits:
                _post(f"{key}/{found.me}", error or "")
        return
    with scratch_dir(prefix) as tmp:
        yield tmp
    if waits:
        writer = found.layout.writer_of(found.me)
        value = _wait(f"{key}/{writer}")
        if value is None:
            logging.warning(
                "tfdist_opt: %s did not report finishing its save into %s within %g s; continuing",
                writer,
                directory,
                BARRIER_TIMEOUT_S,
            )
        elif value:
            raise OSError(
                f"tfdist_opt: {writer}, which writes {directory} for "
                f"this worker, failed to save: {value}"
            )


def _post(key: str, value: str) -> None:
    try:
        _store().set(key, value)
    except Exception as e:  # pylint: disable=broad-except
        _warn_once(
            "post",
            f"tfdist_opt: could not tell the other workers a save "
            f"finished ({type(e).__name__}: {str(e)[:200]})",
        )


def _wait(key: str) -> str | None:
    try:
        return _store().get(key, BARRIER_TIMEOUT_S)
    except Exception as e:  # pylint: disable=broad-except
        _warn_once(
            "wait",
            f"tfdist_opt: could not wait for the writer's save "
            f"({type(e).__name__}: {str(e)[:200]})",
        )
        return None


def _warn_once(key, message: str) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        logging.warning(message)


def reset_for_tests() -> None:
    """Forgets cached layouts and counters (one process = one job otherwise)."""
    with _LOCK:
        _CACHE.clear()
        _SEQ.update(probe=0, saved=0)
        _STORE.clear()
        _WARNED.clear()
