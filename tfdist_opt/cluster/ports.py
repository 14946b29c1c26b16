"""Ports of a cluster's tasks: is a task's port free on this host?

Pure Python, no TensorFlow. Used before anything starts: by the launcher
for every local task, and by a worker for its own port
(`check_own_port`, before its strategy starts TensorFlow's server), so a
taken port fails by name instead of as a gRPC bind error deep inside TF.
"""

from __future__ import annotations

import errno
import socket
from typing import Mapping, Sequence

from tfdist_opt.cluster import tf_config as tf_config_lib


class LaunchError(RuntimeError):
    """The launch could not start (port taken, bad arguments)."""


class PortInUseError(LaunchError):
    """A task's port is already bound by another process."""


def port_in_use(port: int) -> bool:
    """True if `port` cannot be bound on all interfaces (as TF's server does)."""
    return _bind_error(port) is not None


def _bind_error(port: int) -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("", port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                return "is already in use on this host"
            if e.errno == errno.EACCES:
                return (
                    "cannot be bound on this host (permission denied: "
                    "ports below 1024 need privileges)"
                )
            raise
    return None


def check_ports_free(tasks: Sequence[tuple[str, int]]) -> None:
    """Pre-flight: raises PortInUseError naming the first taken (task, port).

    Args:
        tasks: sequence of (task name, port), e.g. `[("worker 0", 2222)]`.
    """
    for task, port in tasks:
        problem = _bind_error(port)
        if problem:
            raise PortInUseError(
                f"Port {port} for {task} {problem}: TensorFlow could not start "
                "that task's server. Stop the process holding it (`ss -ltnp | "
                f"grep :{port}`) or choose other ports. Received: {task} "
                f"port={port}"
            )


def check_own_port(cfg: Mapping, hostnames: Sequence[str] | None = None) -> None:
    """Pre-flight for one process: is this task's own port free here?

    Looks up this task's address in a validated TF_CONFIG; when its host is
    this machine (loopback, or `socket.gethostname()` / FQDN, or one of
    `hostnames`), raises `PortInUseError` naming the task and port if
    something already listens there. Call it before creating the strategy.
    """
    task = cfg["task"]
    address = cfg["cluster"][task["type"]][task["index"]]
    host, port = tf_config_lib.split_address(address)
    if _is_this_host(host, hostnames):
        check_ports_free([(f"{task['type']} {task['index']} ({address})", int(port))])


def _is_this_host(host: str, hostnames: Sequence[str] | None = None) -> bool:
    if tf_config_lib.is_loopback_host(host):
        return True
    names = set(hostnames or ())
    if hostnames is None:
        try:
            names = {socket.gethostname(), socket.getfqdn()}
        except OSError:
            return False
    short = {n.split(".", 1)[0].lower() for n in names}
    return host.lower() in {n.lower() for n in names} or (host.split(".", 1)[0].lower() in short)
