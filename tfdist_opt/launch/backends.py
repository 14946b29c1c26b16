"""The launch backends behind one interface: `local` and `ray`.

Each backend takes its own options at construction and runs a `Layout`
under a `RestartPolicy` (`tfdist_opt.launch.contract`). Backends only place
and start tasks: the layout (roles, GPUs, forwarded environment) and the
restart rule are decided before they run. SLURM and Kubernetes are not
backends: `tfdist-opt launch --slurm` and `tfdist-opt k8s` print what their
schedulers run (`tfdist_opt.launch.remote`, `tfdist_opt.cluster.k8s`).
"""

from __future__ import annotations

import dataclasses
from typing import IO, Sequence

from tfdist_opt.launch import local as local_lib
from tfdist_opt.launch.contract import Backend
from tfdist_opt.launch.contract import LaunchResult
from tfdist_opt.launch.contract import RestartPolicy
from tfdist_opt.launch.layout import Layout


@dataclasses.dataclass
class LocalBackend:
    """Process groups on this host (`tfdist_opt.launch.local.run_local`)."""

    cpu_replicas: int | None = None
    startup_timeout: float | None = local_lib.DEFAULT_STARTUP_TIMEOUT_S
    base_port: int | None = None
    term_timeout: float = local_lib.DEFAULT_TERM_TIMEOUT_S
    quiet: bool = False
    handle_signals: bool = True
    name: str = "local"

    def run(
        self,
        argv: Sequence[str],
        layout: Layout,
        policy: RestartPolicy,
        *,
        stdout: IO[str] | None = None,
        stderr: IO[str] | None = None,
    ) -> LaunchResult:
        return local_lib.run_local(
            argv,
            layout.count("worker"),
            layout=layout,
            num_ps=layout.count("ps"),
            evaluator=layout.has_evaluator,
            max_restarts=policy.max_restarts,
            cpu_replicas=self.cpu_replicas,
            startup_timeout=self.startup_timeout,
            base_port=self.base_port,
            term_timeout=self.term_timeout,
            quiet=self.quiet,
            handle_signals=self.handle_signals,
            stdout=stdout,
            stderr=stderr,
        )


@dataclasses.dataclass
class RayBackend:
    """Ray Train workers (`tfdist_opt.launch.ray_launch.run_ray`).

    Imports Ray only when it runs.
    """

    address: str | None = None
    storage_path: str | None = None
    resize_interval_s: float | None = None
    quiet: bool = True
    handle_signals: bool = True
    name: str = "ray"

    def run(
        self,
        argv: Sequence[str],
        layout: Layout,
        policy: RestartPolicy,
        *,
        stdout: IO[str] | None = None,
        stderr: IO[str] | None = None,
    ) -> LaunchResult:
        from tfdist_opt.launch import ray_launch  # pylint: disable=g-import-not-at-top

        lo = layout.count("worker")
        workers = lo if layout.max_workers is None else f"{lo}:{layout.max_workers}"
        return ray_launch.run_ray(
            argv,
            workers,
            address=self.address,
            max_restarts=policy.max_restarts,
            storage_path=self.storage_path,
            resize_interval_s=self.resize_interval_s,
            env=dict(layout.env) or None,
            gpus_per_worker=layout.gpus_per_worker,
            quiet=self.quiet,
            handle_signals=self.handle_signals,
            stdout=stdout,
            stderr=stderr,
        )


BACKENDS = {"local": LocalBackend, "ray": RayBackend}


def get_backend(name: str, **options) -> Backend:
    """The backend called `name`, built with `options`.

    Raises:
        ValueError: no backend has that name.
    """
    if name not in BACKENDS:
        raise ValueError(
            f"Unrecognized launch backend: {name!r}. Expected one "
            f"of: {', '.join(sorted(BACKENDS))}."
        )
    return BACKENDS[name](**options)
