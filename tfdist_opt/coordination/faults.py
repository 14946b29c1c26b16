"""One line that says what happened when a multi-worker job dies.

TensorFlow reports a lost peer as a long `UnavailableError` /
`DeadlineExceededError` / `AbortedError` traceback whose useful part — which
task, which collective, why — is buried inside. `explain()` pulls those out
(pure string work, no TensorFlow import); `install_excepthook()` prints that
line before the usual traceback when such an error ends the program.
"""

from __future__ import annotations

import re
import sys
from typing import Any, Mapping

_TASK = re.compile(r"/job:(\w+)/replica:\d+/task:(\d+)")
_NODE = re.compile(r"\[\[\{\{node ([^}]+)\}\}\]\]")
_KINDS = {
    "UnavailableError": "a peer became unreachable",
    "DeadlineExceededError": "a collective timed out",
    "AbortedError": "collectives were aborted after a peer failed",
    "CancelledError": "collectives were cancelled after a peer failed",
}
_REASONS = (
    "Connection reset by peer",
    "Socket closed",
    "failed to connect",
    "heartbeat",
    "Deadline Exceeded",
    "timed out",
    "Connection refused",
)


def coordination_leader(tf_config: Mapping[str, Any] | None) -> str | None:
    """`chief:0 (host:port)` or `worker:0 (...)`: the task hosting TF's
    coordination service under MultiWorkerMirroredStrategy."""
    if tf_config is None:
        return None
    cluster = tf_config["cluster"]
    role = "chief" if cluster.get("chief") else "worker"
    tasks = cluster.get(role) or []
    return f"{role}:0 ({tasks[0]})" if tasks else f"{role}:0"


def _kind(exc_type_name: str, message: str, tf_config, collective_timeout_s: float | None) -> str:
    if "CoordinationService/Heartbeat" in message or (
        exc_type_name == "DeadlineExceededError" and "heartbeat" in message.lower()
    ):
        leader = coordination_leader(tf_config) or "the chief (or worker 0)"
        return (
            "the coordination service stopped answering (its heartbeat "
            f"timed out): {leader}, which hosts it, is frozen (e.g. "
            "SIGSTOP), overloaded or unreachable"
        )
    if exc_type_name == "DeadlineExceededError":
        if collective_timeout_s:
            return f"a collective timed out (collective_timeout_s={collective_timeout_s:g})"
        return "a collective timed out (TF's own deadline; no collective_timeout_s was set)"
    return _KINDS[exc_type_name]


def explain(
    exc_type_name: str,
    message: str,
    tf_config: Mapping[str, Any] | None = None,
    collective_timeout_s: float | None = None,
) -> str | None:
    """A one-line summary of a collective failure, or None if it is not one."""
    if exc_type_name not in _KINDS:
        return None
    me = None
    if tf_config is not None:
        me = (tf_config["task"]["type"], int(tf_config["task"]["index"]))
    peers = []
    for role, index in _TASK.findall(message):
        key = (role, int(index))
        if key != me and key not in peers:
            peers.append(key)
    names = []
    for role, index in peers:
        address = ""
        if tf_config is not None:
            tasks = tf_config["cluster"].get(role, [])
            if index < len(tasks):
                address = f" ({tasks[index]})"
        names.append(f"{role}:{index}{address}")
    node = _NODE.search(message)
    reason = next((r for r in _REASONS if r.lower() in message.lower()), None)
    text = "tfdist_opt: training stopped: " + _kind(
        exc_type_name, message, tf_config, collective_timeout_s
    )
    if names:
        text += f"; lost task: {', '.join(names)}"
    if node:
        text += f"; in collective {node.group(1)}"
    if reason:
        text += f"; cause: {reason}"
    return text + "."


def install_excepthook(
    tf_config: Mapping[str, Any] | None, collective_timeout_s: float | None = None
) -> None:
    """Prints `explain()`'s line before the traceback of a fatal collective error."""
    previous = sys.excepthook
    if getattr(previous, "_tfdist_opt", False):
        return

    def hook(exc_type, exc, tb):
        line = explain(exc_type.__name__, str(exc), tf_config, collective_timeout_s)
        if line:
            print(line, file=sys.stderr, flush=True)
        previous(exc_type, exc, tb)

    hook._tfdist_opt = True
    sys.excepthook = hook
