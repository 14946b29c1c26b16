"""Pure pre-flight checks of `tfdist-opt launch`: arguments, command, ports.

Everything here runs before any process starts; each problem is a
`ValueError` (or `PortInUseError`) naming the flag or task, the value
received and what was expected, which the CLI prints as one
`launch: error:` line with exit code 2.
"""

from __future__ import annotations

import errno
import math
import os
import shlex
import shutil
import socket
from typing import Mapping, Sequence

from tfdist_opt.cluster import tf_config as tf_config_lib


class LaunchError(RuntimeError):
    """The launch could not start (port taken, bad arguments)."""


class PortInUseError(LaunchError):
    """A task's port is already bound by another process."""


def check_cpu_replicas(num_workers: int, cpu_replicas: int | None) -> None:
    """`--cpu-replicas K>1` only makes sense for one process (no TF_CONFIG).

    MultiWorkerMirroredStrategy uses one CPU device per worker, and
    `opt_strategy` rejects `cpu_replicas > 1` under multi-worker, so the
    launcher says so before starting anything.
    """
    if cpu_replicas is None:
        return
    if isinstance(cpu_replicas, bool) or not isinstance(cpu_replicas, int) \
            or cpu_replicas < 0:
        raise ValueError(
            "Invalid value for `--cpu-replicas`: expected an int >= 0. "
            f"Received: --cpu-replicas={cpu_replicas!r}")
    if cpu_replicas > 1 and num_workers > 1:
        raise ValueError(
            "Invalid value for `--cpu-replicas`: more than one virtual CPU "
            "replica is only possible with -n 1 (one process running "
            "MirroredStrategy over K virtual CPUs); multi-worker training uses "
            "one CPU device per worker. Received: "
            f"--cpu-replicas={cpu_replicas} with -n {num_workers}. Use -n "
            f"{num_workers} --cpu-replicas 1 or -n 1 --cpu-replicas "
            f"{cpu_replicas}.")


def check_command(argv: Sequence[str], cwd: str | None = None,
                  path: str | None = None) -> None:
    """The program `argv[0]` exists and can be executed (before any start).

    Args:
        argv: the worker command.
        cwd: directory the workers run in (relative program paths).
        path: the workers' PATH. Defaults to this process's.
    """
    if not argv:
        raise ValueError("Nothing to launch: expected a command after `--`. "
                         "Received: an empty command")
    prog = str(argv[0])
    if os.sep in prog or (os.altsep and os.altsep in prog):
        full = os.path.join(cwd or os.getcwd(), prog)
        if not os.path.exists(full):
            raise ValueError(f"Invalid command: {prog!r} does not exist "
                             f"(looked in {os.path.dirname(full) or '.'}). "
                             f"Received: -- {shlex.join(argv)}")
        if os.path.isdir(full):
            raise ValueError(f"Invalid command: {prog!r} is a directory. "
                             f"Received: -- {shlex.join(argv)}")
        if not os.access(full, os.X_OK):
            raise ValueError(
                f"Invalid command: {prog!r} is not executable; run it through "
                f"its interpreter (e.g. `-- python {prog}`) or `chmod +x` it. "
                f"Received: -- {shlex.join(argv)}")
        return
    if shutil.which(prog, path=path if path is not None else
                    os.environ.get("PATH", os.defpath)) is None:
        raise ValueError(f"Invalid command: {prog!r} was not found on PATH. "
                         f"Received: -- {shlex.join(argv)}")


def check_launch_numbers(num_workers: int, base_port: int | None,
                         startup_timeout: float | None,
                         term_timeout: float) -> None:
    """Ports in 1..65535 for every worker; timeouts finite and >= 0."""
    if base_port is not None:
        if isinstance(base_port, bool) or not isinstance(base_port, int) or \
                not 1 <= base_port <= 65536 - num_workers:
            raise ValueError(
                "Invalid value for `--base-port`: expected an int in "
                f"[1, {65536 - num_workers}] so that all {num_workers} "
                f"worker port(s) base_port..base_port+{num_workers - 1} are "
                f"<= 65535. Received: --base-port={base_port!r}")
    for flag, value in (("--startup-timeout", startup_timeout),
                        ("--term-timeout", term_timeout)):
        if value is None and flag == "--startup-timeout":
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                not math.isfinite(value) or value < 0:
            raise ValueError(f"Invalid value for `{flag}`: expected seconds "
                             f">= 0 (0 disables the start-up check). "
                             f"Received: {flag}={value!r}")


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
                return ("cannot be bound on this host (permission denied: "
                        "ports below 1024 need privileges)")
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
                f"port={port}")


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
        check_ports_free([(f"{task['type']} {task['index']} ({address})",
                           int(port))])


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
    return host.lower() in {n.lower() for n in names} or (
        host.split(".", 1)[0].lower() in short)


