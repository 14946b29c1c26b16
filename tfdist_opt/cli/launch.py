"""`tfdist-opt launch`: run workers with generated TF_CONFIG. Never imports TF.

The flags and their examples are in `launch_args` (`tfdist-opt launch -h`);
this module turns parsed flags into a launch: local workers, per-host lines,
a SLURM step or a Ray job.
"""

from __future__ import annotations

import os
import shlex
import sys

from tfdist_opt.cluster import sources
from tfdist_opt.launch import backends
from tfdist_opt.launch import env_forward
from tfdist_opt.launch import gpus as gpus_lib
from tfdist_opt.launch import layout as layout_lib
from tfdist_opt.launch import local as launcher_lib
from tfdist_opt.launch import remote
from tfdist_opt.launch.contract import RestartPolicy

from tfdist_opt.cli.launch_args import PROG
from tfdist_opt.cli.launch_args import build_parser


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
        return remote.run_srun(line)
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
