"""A deadline for multi-worker start-up, naming the tasks that never came.

Creating a `MultiWorkerMirroredStrategy` blocks inside TensorFlow's C++
runtime (`context.ensure_initialized`) until every peer has joined; a peer
that never starts makes the others wait for up to an hour (TF's
coordination-service default). That call holds the GIL, so no Python thread
or signal handler in the same process can run while it waits (seen on TF
2.21). `StartupGuard` therefore starts a tiny watchdog *process* (stdlib
only): if the strategy is not built within `timeout_s`, the watchdog probes
each peer's address (one TCP connect, closed at once, to the host:port
TF_CONFIG names), writes one line naming the tasks that are not listening to
the shared stderr, and ends the blocked process with SIGKILL (exit status
137) — nothing gentler can reach it. Leaving the guard closes the
watchdog's stdin and it exits quietly. Pure Python; no TensorFlow import.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
from typing import Any, Callable, Mapping

from tfdist_opt.cluster import tf_config as tf_config_lib
from tfdist_opt.coordination import watchdog as watchdog_lib

EXIT_STARTUP_TIMEOUT = 128 + signal.SIGKILL  # the guarded process's status


def peer_addresses(cfg: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(task name, address) of every collective peer but this task."""
    me = (cfg["task"]["type"], cfg["task"]["index"])
    out = []
    for role in ("chief", "worker"):
        for i, address in enumerate(cfg["cluster"].get(role, [])):
            if (role, i) != me:
                out.append((f"{role}:{i}", address))
    return out


def is_listening(address: str, timeout_s: float = 1.0) -> bool:
    """True if a TCP connect to `address` (host:port) succeeds."""
    host, port = tf_config_lib.split_address(address)
    host = host.strip("[]")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return True
    except (OSError, ValueError, TypeError):
        return False


def missing_peers(cfg: Mapping[str, Any], probe: Callable[[str], bool] = is_listening) -> list[str]:
    """'role:index (address)' for each peer that is not listening."""
    return [f"{name} ({address})" for name, address in peer_addresses(cfg) if not probe(address)]


def timeout_message(cfg: Mapping[str, Any], timeout_s: float, missing: list[str]) -> str:
    me = f"{cfg['task']['type']}:{cfg['task']['index']}"
    if missing:
        who = "; not listening: " + ", ".join(missing)
    else:
        who = "; every peer's port answers, but the cluster did not form"
    return (
        f"tfdist_opt: {me} gave up: multi-worker start-up did not finish "
        f"within startup_timeout_s={timeout_s:g} s{who}. Killing the "
        f"process (exit status {EXIT_STARTUP_TIMEOUT})."
    )


class StartupGuard:
    """Context manager bounding the wait for peers while a strategy is built.

    Args:
        cfg: dict. This process's validated TF_CONFIG.
        timeout_s: float or None. Deadline in seconds; None disables.

    Example:
        >>> with StartupGuard(tf_config, 60.0):  # doctest: +SKIP
        ...     strategy = tf.distribute.MultiWorkerMirroredStrategy()
    """

    def __init__(self, cfg: Mapping[str, Any], timeout_s: float | None):
        self.cfg = cfg
        self.timeout_s = timeout_s
        self._watchdog: subprocess.Popen | None = None

    def __enter__(self) -> "StartupGuard":
        if self.timeout_s is not None:
            self._watchdog = subprocess.Popen(
                watchdog_lib.bare_python(
                    "startup_guard",
                    "_watchdog_main",
                    str(os.getpid()),
                    repr(float(self.timeout_s)),
                    json.dumps(self.cfg),
                ),
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
            )
        return self

    def __exit__(self, *exc) -> None:
        if self._watchdog is not None:
            self._watchdog.stdin.close()  # "done": the watchdog exits
            try:
                self._watchdog.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._watchdog.kill()
                self._watchdog.wait()


def watch(
    parent_pid: int,
    timeout_s: float,
    cfg: Mapping[str, Any],
    done_fd: int,
    kill: Callable[[int, int], Any] = os.kill,
    probe: Callable[[str], bool] = is_listening,
    err=None,
) -> bool:
    """The watchdog's loop: True if it fired (and killed `parent_pid`)."""
    ready, _, _ = select.select([done_fd], [], [], timeout_s)
    if ready:
        return False
    message = timeout_message(cfg, timeout_s, missing_peers(cfg, probe))
    print(message, file=err or sys.stderr, flush=True)
    kill(parent_pid, signal.SIGKILL)
    return True


def _watchdog_main() -> None:
    parent_pid, timeout_s, cfg = int(sys.argv[1]), float(sys.argv[2]), json.loads(sys.argv[3])
    watch(parent_pid, timeout_s, cfg, sys.stdin.fileno())
