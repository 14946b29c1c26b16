"""`tfdist-opt launch`: run workers with generated TF_CONFIG. Never imports TF.

Examples:
    tfdist-opt launch -n 2 -- python train.py --epochs 3
    tfdist-opt launch -n 1 --cpu-replicas 4 -- python train.py
    tfdist-opt launch -n 2 --max-restarts 3 -- python train.py
    tfdist-opt launch --slurm -- python train.py        # print the srun line
    tfdist-opt launch --slurm --run -- python train.py  # run it
    tfdist-opt launch --workers h1:2222,h2:2222 -- python train.py  # per-host lines
    tfdist-opt launch --workers 2 --ps 2 -- python train.py  # chief + 2 workers + 2 ps
    tfdist-opt launch --workers h1:2222,h2:2222,h3:2222 --ps h4:2222 -- python train.py
    tfdist-opt launch -n 2 --evaluator -- python train.py  # + side-car evaluator
    tfdist-opt launch --workers h1:2222,h2:2222 --evaluator h3:2222 -- python train.py
    tfdist-opt launch --ray -n 2 -- python train.py        # a local Ray, started and stopped
    tfdist-opt launch --ray auto -n 2:4 --max-restarts 3 -- python train.py  # a Ray cluster
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys

from tfdist_opt.cluster import sources
from tfdist_opt.launch import backends
from tfdist_opt.launch import env_forward
from tfdist_opt.launch import gpus as gpus_lib
from tfdist_opt.launch import layout as layout_lib
from tfdist_opt.launch import local as launcher_lib
from tfdist_opt.launch import remote
from tfdist_opt.launch.contract import RestartPolicy

PROG = "tfdist-opt launch"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        usage=f"{PROG} [OPTIONS] -- CMD [ARGS...]",
        description=(
            "Run CMD as N local workers, each with its own TF_CONFIG on free "
            "localhost ports; stream their output prefixed [worker i]; stop "
            "all when one fails. On a cluster, print (or run) the commands "
            "for each host."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:" + __doc__.split("Examples:", 1)[1],
    )
    p.add_argument(
        "-n",
        "--num-workers",
        type=_workers_arg,
        default=None,
        metavar="N|MIN:MAX",
        help="worker processes to start (MIN:MAX: elastic, with --ray)",
    )
    p.add_argument(
        "--cpu-replicas",
        type=int,
        default=None,
        metavar="K",
        help="set TFDIST_OPT_CPU_REPLICAS=K in each worker (K > 1 "
        "only with -n 1: one process, K virtual CPUs)",
    )
    p.add_argument(
        "--max-restarts",
        type=int,
        default=0,
        metavar="R",
        help="restart the whole group up to R times after a failure (default: %(default)s)",
    )
    p.add_argument(
        "--startup-timeout",
        type=float,
        default=launcher_lib.DEFAULT_STARTUP_TIMEOUT_S,
        metavar="S",
        help="seconds for every worker's TF server to start "
        "listening; 0 disables (default: %(default)g)",
    )
    p.add_argument(
        "--term-timeout",
        type=float,
        default=launcher_lib.DEFAULT_TERM_TIMEOUT_S,
        metavar="S",
        help="seconds between SIGTERM and SIGKILL when stopping workers (default: %(default)g)",
    )
    p.add_argument(
        "--gpus-per-worker",
        type=int,
        default=None,
        metavar="K",
        help="GPUs each worker sees (CUDA_VISIBLE_DEVICES; 0: CPU "
        "only). Local: disjoint slices of the visible GPUs "
        "(default: all, split equally); --ray: asked of Ray "
        "(default: 1 when the cluster has GPUs); --slurm: "
        "srun --gpus-per-task",
    )
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME[=VALUE]",
        help="set NAME in every task (repeatable); NAME alone forwards "
        "this environment's value. With --ray the launcher's "
        "TFDIST_OPT_* and TF_* variables are forwarded too (local "
        "tasks inherit everything)",
    )
    p.add_argument(
        "--base-port",
        type=int,
        default=None,
        metavar="P",
        help="local worker i listens on P+i (default: free ports)",
    )
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="show TensorFlow's C++ start-up lines (by default "
        "TF_CPP_MIN_LOG_LEVEL=2 unless set, and known "
        "start-up noise hidden; errors always show)",
    )
    remote_group = p.add_mutually_exclusive_group()
    remote_group.add_argument(
        "--slurm",
        action="store_true",
        help="inside a SLURM allocation: print the srun line (or run it with --run)",
    )
    remote_group.add_argument(
        "--workers",
        metavar="N|H:P,H:P",
        help="a number: local workers (as -n); a host list: print the command for each host",
    )
    remote_group.add_argument(
        "--hostfile", metavar="PATH", help="print the command for each host slot"
    )
    remote_group.add_argument("--slurm-task", action="store_true", help=argparse.SUPPRESS)
    remote_group.add_argument(
        "--ray",
        nargs="?",
        const="",
        default=None,
        metavar="ADDRESS",
        help="run the workers on Ray (Ray Train): a local Ray started and "
        "stopped for the run, or the cluster at ADDRESS (auto, "
        "ray://host:10001, host:6379); needs tfdist_opt[ray]",
    )
    p.add_argument(
        "--ray-resize-interval",
        type=float,
        default=None,
        metavar="S",
        help="with --ray -n MIN:MAX: how often Ray considers growing "
        "a healthy group (default: Ray's, 60 s)",
    )
    p.add_argument(
        "--ray-storage",
        metavar="PATH",
        default=None,
        help="with --ray: Ray Train's checkpoint storage (shared by "
        "all nodes; default: a temporary directory)",
    )
    p.add_argument(
        "--ps",
        metavar="K|H:P,H:P",
        default=None,
        help="parameter-server training: a number starts a chief, the "
        "workers and K ps tasks locally; with a --workers/--hostfile "
        "host list, the first host is the chief and these are the ps "
        "tasks",
    )
    p.add_argument(
        "--evaluator",
        nargs="?",
        const="",
        default=None,
        metavar="H:P",
        help="also run CMD as the side-car `evaluator` task (TF_CONFIG "
        "role, not part of the training cluster; it runs "
        "tfdist_opt.SidecarEvaluator). Local: no value; with a "
        "--workers/--hostfile host list: its host:port",
    )
    p.add_argument(
        "--run", action="store_true", help="with --slurm: run the srun line instead of printing it"
    )
    p.add_argument(
        "--port",
        type=int,
        default=sources.DEFAULT_PORT,
        help="first port per host for --slurm/--hostfile/--workers (default: %(default)s)",
    )
    return p


def _workers_arg(text: str):
    """`-n`: an int, or "MIN:MAX" (kept as text; only --ray takes it)."""
    text = text.strip()
    if text.isdigit():
        return int(text)
    if re.fullmatch(r"\d+:\d+", text):
        return text
    raise argparse.ArgumentTypeError(f"expected N or MIN:MAX (positive ints). Received: -n {text}")


def split_command(argv: list[str]) -> tuple[list[str], list[str]]:
    """Options before the first `--`, the command after it."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return argv, []


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    options, command = split_command(argv)
    parser = build_parser()
    try:
        args = parser.parse_args(options)
    except SystemExit as e:
        return int(e.code or 0)
    if not command:
        print(
            f"{PROG}: error: nothing to launch: put the command after `--`, "
            f"e.g. `{PROG} -n 2 -- python train.py`",
            file=sys.stderr,
        )
        return 2
    try:
        return _run(args, command)
    except (ValueError, TypeError, ImportError, launcher_lib.LaunchError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2


def _run(args, command: list[str]) -> int:
    if args.slurm_task:
        remote.exec_slurm_task(command, port=args.port)
        return 0  # not reached
    if args.ray is not None:
        return _run_ray(args, command)
    for name, value in (
        ("--ray-storage", args.ray_storage),
        ("--ray-resize-interval", args.ray_resize_interval),
    ):
        if value is not None:
            raise ValueError(f"`{name}` needs --ray. Received: {name} {value} without --ray.")
    if isinstance(args.num_workers, str):
        raise ValueError(
            "Invalid value for `-n`: MIN:MAX (elastic) needs --ray; "
            f"a local launch runs a fixed N. Received: -n "
            f"{args.num_workers}"
        )
    if args.slurm and args.evaluator is not None:
        raise ValueError(
            "`--evaluator` with --slurm: launch gives every SLURM task "
            "the worker role. Received: --slurm --evaluator. Expected: "
            "run the evaluator as its own job step with a TF_CONFIG "
            "from `tfdist-opt tf-config --evaluator H:P`."
        )
    if args.slurm and args.ps is not None:
        raise ValueError(
            "`--ps` with --slurm: launch gives every SLURM task the "
            "worker role. Received: --slurm --ps. Expected: run "
            "`tfdist-opt tf-config --slurm --num-ps K` in each task."
        )
    if args.slurm and args.env:
        raise ValueError(
            "`--env` with --slurm: srun passes this environment to "
            "every task (SLURM's default --export=ALL). Received: "
            f"--slurm --env {args.env[0]}. Expected: set the variable "
            "before `launch --slurm --run` (or the srun line)."
        )
    if args.slurm:
        line = remote.srun_command(
            command, os.environ, port=args.port, gpus_per_task=args.gpus_per_worker
        )
        if not args.run:
            print(shlex.join(line))
            return 0
        print(f"[launch] running: {shlex.join(line)}", file=sys.stderr)
        return subprocess.call(line)
    if args.workers is not None and args.workers.strip().isdigit():
        if args.num_workers is not None:
            raise ValueError(
                "`--workers N` and `-n` both count local workers. "
                f"Received: --workers {args.workers}, -n "
                f"{args.num_workers}. Expected one of them."
            )
        args.num_workers, args.workers = int(args.workers), None
    num_ps = _local_ps(args.ps)
    if args.workers is not None or args.hostfile is not None:
        workers = (
            sources.parse_host_list(args.workers, default_port=args.port)
            if args.workers is not None
            else sources.read_hostfile(args.hostfile, port=args.port)
        )
        if args.env:
            raise ValueError(
                "`--env` with a host list: each printed line runs with the "
                f"environment of the host it runs on. Received: --env {args.env[0]}. "
                "Expected: set the variable on each host's line."
            )
        if args.gpus_per_worker is not None:
            raise ValueError(
                "`--gpus-per-worker` with a host list: each printed line runs one "
                "task on its own host. Received: --gpus-per-worker "
                f"{args.gpus_per_worker}. Expected: set CUDA_VISIBLE_DEVICES on "
                "each host's line, or use -n N, --ray or --slurm."
            )
        cluster = {"worker": workers}
        if args.ps is not None:
            if num_ps is not None:
                cluster, _ = sources.assign_ps_roles(workers, num_ps)
            else:
                if len(workers) < 2:
                    raise ValueError(
                        "Invalid parameter-server cluster: --ps needs a chief and at "
                        f"least one worker in the host list. Received: {len(workers)} "
                        "host(s). Expected at least 2 (the first is the chief)."
                    )
                cluster = {
                    "chief": workers[:1],
                    "worker": workers[1:],
                    "ps": sources.parse_host_list(args.ps, default_port=args.port),
                }
        if args.evaluator is not None:
            if not args.evaluator:
                raise ValueError(
                    "Missing address for `--evaluator`: with a host list, give "
                    "the evaluator's host:port. Received: --evaluator (no value). "
                    "Expected e.g. --evaluator h3:2222."
                )
            cluster["evaluator"] = sources.parse_host_list(args.evaluator, default_port=args.port)[
                :1
            ]
        print(
            "# Run on each host (TF's gRPC server is unauthenticated: keep "
            "these ports on a private network):"
        )
        for address, task_type, index, line in remote.per_host_commands(cluster, command):
            print(f"# {task_type} {index} on {address}\n{line}")
        return 0
    if args.ps is not None and num_ps is None:
        raise ValueError(
            "Invalid value for `--ps`: a host list needs the workers' "
            "host list too (--workers H:P,... or --hostfile). Received: "
            f"--ps {args.ps}. Expected a number for a local cluster."
        )
    if args.num_workers is None:
        raise ValueError(
            "Missing `-n`: how many local workers? Pass -n N "
            "(or --slurm / --workers / --hostfile for a "
            "cluster). Received: -n None"
        )
    layout = gpus_lib.placed_layout(
        args.num_workers,
        num_ps or 0,
        _local_evaluator(args.evaluator),
        args.gpus_per_worker,
        forward=env_forward.parse_env_flags(args.env, os.environ),
    )
    backend = backends.LocalBackend(
        cpu_replicas=args.cpu_replicas,
        startup_timeout=args.startup_timeout or None,
        base_port=args.base_port,
        term_timeout=args.term_timeout,
        quiet=not args.verbose,
    )
    return backend.run(command, layout, RestartPolicy(args.max_restarts)).returncode


def _run_ray(args, command: list[str]) -> int:
    """`--ray [ADDRESS]`: the Ray backend of the launcher contract."""
    unsupported = [
        name
        for name, value in (
            ("--ps", args.ps),
            ("--evaluator", args.evaluator),
            ("--cpu-replicas", args.cpu_replicas),
            ("--base-port", args.base_port),
        )
        if value is not None
    ]
    if unsupported:
        raise ValueError(
            f"`{unsupported[0]}` with --ray: Ray places the workers "
            "and picks their ports. Received: --ray "
            f"{' '.join(unsupported)}. Expected -n N|MIN:MAX, "
            "--max-restarts, --ray-storage."
        )
    if args.num_workers is None:
        raise ValueError(
            "Missing `-n`: how many Ray workers? Pass -n N or -n MIN:MAX. Received: -n None"
        )
    layout = layout_lib.worker_layout(
        args.num_workers,
        env=env_forward.forwarded(os.environ, env_forward.parse_env_flags(args.env, os.environ)),
        gpus_per_worker=gpus_lib.check_gpus_per_worker(args.gpus_per_worker),
    )
    backend = backends.RayBackend(
        address=args.ray or None,
        storage_path=args.ray_storage,
        resize_interval_s=args.ray_resize_interval,
        quiet=not args.verbose,
    )
    return backend.run(command, layout, RestartPolicy(args.max_restarts)).returncode


def _local_evaluator(text: str | None) -> bool:
    """`--evaluator` for a local launch: a flag (an address is for host lists)."""
    if text:
        raise ValueError(
            "Invalid value for `--evaluator`: a local launch picks the "
            f"evaluator's port itself. Received: --evaluator {text}. "
            "Expected --evaluator with no value (an address only with "
            "--workers/--hostfile host lists)."
        )
    return text is not None


def _local_ps(text: str | None) -> int | None:
    """`--ps K` as an int (None: not given, or a host list)."""
    if text is None or not text.strip().isdigit():
        return None
    k = int(text)
    if k < 1:
        raise ValueError(
            "Invalid value for `--ps`: expected a positive number of "
            f"ps tasks or a host list. Received: --ps {text}"
        )
    return k
