"""All workers agree on the state they resume from, before step 1.

Each worker posts what it restored (step, backup name, directory) and any
start-up problem of its own (an unwritable backup directory, no valid
backup) under `tfdist_opt/restore/<n>/<task>` in the coordination
service's key-value store, then reads every other task's entry. The
decision is a pure function of the entries, so every worker reaches the
same one at once: if any worker had a problem, or the steps differ, every
worker raises `RestoreMismatchError` with one line naming each worker's
step and directory. Without this check the usual multi-host mistake (each
host with its own `backup_dir`) trains on, then dies steps later with TF's
"Shape mismatch in the collective instance ..." or, worse, silently mixes
states.

`n` counts this process's `fit` calls with a backup callback, identical on
every worker because every worker runs the same calls in the same order.
"""

from __future__ import annotations

import json
import os
import threading

from absl import logging

from tfdist_opt.strategy import topology as topology_lib
from tfdist_opt.callbacks import _common
from tfdist_opt.callbacks import preemption as preemption_lib
from tfdist_opt.callbacks.preemption import KeyValueStore

_PREFIX = "tfdist_opt/restore"
# How long a worker waits for the others to reach `on_train_begin`. Long:
# workers can take different times to build their input; a dead or frozen
# peer is reported sooner by TF's coordination service itself.
DEFAULT_TIMEOUT_S = 600.0
_LOCK = threading.Lock()
_SEQ = [0]


class RestoreMismatchError(RuntimeError):
    """Workers would start from different states (or one cannot start)."""


def next_namespace() -> str:
    with _LOCK:
        _SEQ[0] += 1
        return f"{_PREFIX}/{_SEQ[0]}"


def entry(step: int, name: str | None, directory: str, error: str | None = None) -> dict:
    """What one worker posts."""
    return {"step": step, "name": name, "dir": directory, "error": error}


def exchange(
    me: str,
    tasks: list[str],
    store: KeyValueStore,
    namespace: str,
    mine: dict,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> dict:
    """Posts `mine`, returns {task: entry} for every task (None: never posted)."""
    store.set(f"{namespace}/{me}", json.dumps(mine, sort_keys=True))
    found = {}
    for task in tasks:
        if task == me:
            found[task] = mine
            continue
        value = store.get(f"{namespace}/{task}", timeout_s)
        found[task] = None if value is None else json.loads(value)
    return found


def _describe(task: str, e: dict | None, timeout_s: float) -> str:
    if e is None:
        return f"{task}: did not reach on_train_begin within {timeout_s:g} s"
    where = f"{e['name']} in {e['dir']}" if e["name"] else f"no backup in {e['dir']}"
    text = f"{task} at step {e['step']} ({where})"
    return text + (f" [{e['error']}]" if e.get("error") else "")


def decide(entries: dict, timeout_s: float = DEFAULT_TIMEOUT_S) -> str | None:
    """One line if the workers cannot start together, else None. Pure."""
    values = list(entries.values())
    broken = any(e is None or e.get("error") for e in values)
    steps = {e["step"] for e in values if e is not None}
    if not broken and len(steps) <= 1:
        return None
    parts = "; ".join(_describe(t, e, timeout_s) for t, e in entries.items())
    if broken:
        return (
            f"tfdist_opt: not starting: a worker cannot start: {parts}. "
            "No step was run on any worker."
        )
    return (
        "tfdist_opt: not starting: workers restored different states: "
        f"{parts}. Every worker must read the same backups: one backup_dir "
        "on storage they all see, or on each host's disk a copy of the same "
        "backup. No step was run on any worker."
    )


def agree_or_raise(
    meta: dict | None,
    exc: BaseException | None,
    backup_dir: str,
    store: KeyValueStore | None = None,
) -> None:
    """At `on_train_begin`: raises `exc` (one process), or, in a cluster,
    `RestoreMismatchError` on every worker when any had a problem or the
    restored steps differ."""
    topo = topology_lib.detect_topology(gpus=())
    tasks = preemption_lib.task_names(topo.tf_config) if topo.is_multi_worker else ["local"]
    if len(tasks) < 2:
        if exc is not None:
            raise exc
        return
    mine = entry(
        (meta or {}).get("step", 0),
        (meta or {}).get("name"),
        os.path.abspath(backup_dir),
        None if exc is None else str(exc),
    )
    namespace = next_namespace()
    try:
        store = store or preemption_lib.TFKeyValueStore()
        entries = exchange(_common.task_tag(), tasks, store, namespace, mine)
    except Exception as e:  # pylint: disable=broad-except
        # No coordination service (a TF_CONFIG without MultiWorkerMirrored-
        # Strategy) or a peer already lost: nothing to compare with.
        if exc is not None:
            raise exc
        logging.warning(
            "tfdist_opt: could not compare the restored step with "
            "the other workers (%s: %s); continuing",
            type(e).__name__,
            (str(e).splitlines() or [""])[0][:200],
        )
        return
    line = decide(entries)
    if line is not None:
        logging.error(line)
        raise RestoreMismatchError(line) from exc
