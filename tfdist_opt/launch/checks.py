"""Pure pre-flight checks of `tfdist-opt launch`: arguments and command.

The port checks live in `tfdist_opt.cluster.ports` (a worker runs one on
its own port too) and are re-exported here.

Everything here runs before any process starts; each problem is a
`ValueError` (or `PortInUseError`) naming the flag or task, the value
received and what was expected, which the CLI prints as one
`launch: error:` line with exit code 2.
"""

from __future__ import annotations

import math
import os
import shlex
import shutil
from typing import Sequence

from tfdist_opt.cluster.ports import LaunchError  # noqa: F401  (re-exported)
from tfdist_opt.cluster.ports import PortInUseError  # noqa: F401  (re-exported)
from tfdist_opt.cluster.ports import check_own_port  # noqa: F401  (re-exported)
from tfdist_opt.cluster.ports import check_ports_free  # noqa: F401  (re-exported)
from tfdist_opt.cluster.ports import port_in_use  # noqa: F401  (re-exported)


def check_cpu_replicas(num_workers: int, cpu_replicas: int | None) -> None:
    """`--cpu-replicas K>1` only makes sense for one process (no TF_CONFIG).

    MultiWorkerMirroredStrategy uses one CPU device per worker, and
    `opt_strategy` rejects `cpu_replicas > 1` under multi-worker, so the
    launcher says so before starting anything.
    """
    if cpu_replicas is None:
        return
    if isinstance(cpu_replicas, bool) or not isinstance(cpu_replicas, int) or cpu_replicas < 0:
        raise ValueError(
            "Invalid value for `--cpu-replicas`: expected an int >= 0. "
            f"Received: --cpu-replicas={cpu_replicas!r}"
        )
    if cpu_replicas > 1 and num_workers > 1:
        raise ValueError(
            "Invalid value for `--cpu-replicas`: more than one virtual CPU "
            "replica is only possible with -n 1 (one process running "
            "MirroredStrategy over K virtual CPUs); multi-worker training uses "
            "one CPU device per worker. Received: "
            f"--cpu-replicas={cpu_replicas} with -n {num_workers}. Use -n "
            f"{num_workers} --cpu-replicas 1 or -n 1 --cpu-replicas "
            f"{cpu_replicas}."
        )


def check_command(argv: Sequence[str], cwd: str | None = None, path: str | None = None) -> None:
    """The program `argv[0]` exists and can be executed (before any start).

    Args:
        argv: the worker command.
        cwd: directory the workers run in (relative program paths).
        path: the workers' PATH. Defaults to this process's.
    """
    if not argv:
        raise ValueError(
            "Nothing to launch: expected a command after `--`. Received: an empty command"
        )
    prog = str(argv[0])
    if os.sep in prog or (os.altsep and os.altsep in prog):
        full = os.path.join(cwd or os.getcwd(), prog)
        if not os.path.exists(full):
            raise ValueError(
                f"Invalid command: {prog!r} does not exist "
                f"(looked in {os.path.dirname(full) or '.'}). "
                f"Received: -- {shlex.join(argv)}"
            )
        if os.path.isdir(full):
            raise ValueError(
                f"Invalid command: {prog!r} is a directory. Received: -- {shlex.join(argv)}"
            )
        if not os.access(full, os.X_OK):
            raise ValueError(
                f"Invalid command: {prog!r} is not executable; run it through "
                f"its interpreter (e.g. `-- python {prog}`) or `chmod +x` it. "
                f"Received: -- {shlex.join(argv)}"
            )
        return
    if (
        shutil.which(prog, path=path if path is not None else os.environ.get("PATH", os.defpath))
        is None
    ):
        raise ValueError(
            f"Invalid command: {prog!r} was not found on PATH. Received: -- {shlex.join(argv)}"
        )


def check_launch_numbers(
    num_workers: int, base_port: int | None, startup_timeout: float | None, term_timeout: float
) -> None:
    """Ports in 1..65535 for every worker; timeouts finite and >= 0."""
    if base_port is not None:
        if (
            isinstance(base_port, bool)
            or not isinstance(base_port, int)
            or not 1 <= base_port <= 65536 - num_workers
        ):
            raise ValueError(
                "Invalid value for `--base-port`: expected an int in "
                f"[1, {65536 - num_workers}] so that all {num_workers} "
                f"worker port(s) base_port..base_port+{num_workers - 1} are "
                f"<= 65535. Received: --base-port={base_port!r}"
            )
    for flag, value in (("--startup-timeout", startup_timeout), ("--term-timeout", term_timeout)):
        if value is None and flag == "--startup-timeout":
            continue
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or value < 0
        ):
            raise ValueError(
                f"Invalid value for `{flag}`: expected seconds "
                f">= 0 (0 disables the start-up check). "
                f"Received: {flag}={value!r}"
            )
