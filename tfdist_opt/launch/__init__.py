"""Launching: a task layout, one restart policy, backends that start tasks.

- `layout`: the `Layout` value (roles in start order, each task's GPUs,
  the environment forwarded to every task), decided before anything
  starts; `gpus` places GPUs by one rule for every backend, `env_forward`
  decides which variables every task gets;
- `contract`: `LaunchResult`, `RestartPolicy` (one rule for every
  backend) and the `Backend` interface;
- `backends`: `local` (process groups on this host, `local.run_local`)
  and `ray` (Ray Train workers, `ray_launch.run_ray`; imports Ray only
  when it runs; `ray_auth` finds and checks the cluster's token);
- `remote`: what SLURM and per-host launches run (printed, not run).

Layer: above `tfdist_opt.cluster` (cluster description) and
`tfdist_opt.coordination` (in-worker coordination), below the CLI. Pure
Python: nothing here imports TensorFlow (tasks run it in their own
processes).
"""

from tfdist_opt.launch.backends import LocalBackend
from tfdist_opt.launch.backends import RayBackend
from tfdist_opt.launch.backends import get_backend
from tfdist_opt.launch.contract import Backend
from tfdist_opt.launch.contract import LaunchResult
from tfdist_opt.launch.contract import RestartPolicy
from tfdist_opt.launch.layout import Layout
from tfdist_opt.launch.layout import Task
from tfdist_opt.launch.layout import local_layout
from tfdist_opt.launch.local import run_local

__all__ = [
    "Backend",
    "LaunchResult",
    "Layout",
    "LocalBackend",
    "RayBackend",
    "RestartPolicy",
    "Task",
    "get_backend",
    "local_layout",
    "run_local",
]
