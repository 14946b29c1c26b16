"""This process's TensorFlow server: which cluster it was started for.

The first multi-worker strategy in a process starts TF's gRPC server on
this task's port, and TensorFlow cannot stop or restart it in-process. A
later `opt_strategy()` with the same TF_CONFIG must therefore skip the
"is my port free?" pre-flight (the port is our own server) and build a
second `MultiWorkerMirroredStrategy`, which upstream allows and which
all-reduces correctly. A different TF_CONFIG cannot work in this process
and is refused here, before TensorFlow fails with a less clear error.

The second strategy re-runs TF's `enable_collective_ops`, which gives the
process a new collective executor with empty group tables. A peer that is
already past its own second strategy may send its first collective's group
request to this task's *old* executor meanwhile: it is recorded there, the
new one never sees it, and both tasks wait forever in their first
collective (reproduced: task 0 five seconds late, 2 in 2 runs; 1 in ~10
suite-like runs under load). So every second (third...) strategy ends at a
barrier of all tasks (`rendezvous_id` names it), before any collective.
"""

from __future__ import annotations

import json
import threading
from typing import Mapping

_LOCK = threading.Lock()
_STARTED: dict | None = None  # {"cluster": ..., "task": ...} of the running server
_REUSES = 0  # strategies built on the running server so far


def _key(cfg: Mapping) -> dict:
    return {
        "cluster": json.loads(json.dumps(cfg["cluster"], sort_keys=True)),
        "task": {"type": cfg["task"]["type"], "index": int(cfg["task"]["index"])},
    }


def already_running(cfg: Mapping) -> bool:
    """True when this process's server was started for `cfg` already.

    Raises RuntimeError when a server runs for a different cluster or task.
    """
    with _LOCK:
        if _STARTED is None:
            return False
        if _STARTED == _key(cfg):
            return True
        raise RuntimeError(
            "Invalid value for `TF_CONFIG` in a second opt_strategy() call: "
            "this process already runs a TensorFlow server for another "
            "cluster or task, and TensorFlow cannot stop or restart its "
            "server in-process. Received: "
            f"{json.dumps(_key(cfg), sort_keys=True)}. Expected the TF_CONFIG "
            f"of the first call: {json.dumps(_STARTED, sort_keys=True)} "
            "(start a new process for a different cluster)."
        )


def mark_started(cfg: Mapping) -> None:
    global _STARTED
    with _LOCK:
        _STARTED = _key(cfg)


def rendezvous_id() -> str:
    """The barrier id of the next strategy built on the running server.

    Every task builds its strategies in the same order, so the n-th reuse
    has the same id on every task: `tfdist_opt/strategy_reuse/<n>`.
    """
    global _REUSES
    with _LOCK:
        _REUSES += 1
        return f"tfdist_opt/strategy_reuse/{_REUSES}"


def _reset_for_tests() -> None:
    global _STARTED, _REUSES
    with _LOCK:
        _STARTED = None
        _REUSES = 0
