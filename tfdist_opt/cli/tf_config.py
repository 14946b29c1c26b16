"""`tfdist-opt tf-config`: print, write or check TF_CONFIG. Never imports TF.

Examples:
    tfdist-opt tf-config --workers h1:2222,h2:2222 --index 1
    tfdist-opt tf-config --workers h1:2222,h2:2222 --index 1 --format env
    tfdist-opt tf-config --hostfile hosts.txt --out-dir tf_configs/
    tfdist-opt tf-config --slurm                # index from SLURM_PROCID
    tfdist-opt tf-config --k8s trainer.trainer-svc:2222 --replicas 4
    tfdist-opt tf-config --slurm --num-ps 2     # task 0 chief, last 2 ps
    tfdist-opt tf-config --local 5 --num-ps 2 --out-dir tf_configs/
    tfdist-opt tf-config --local 2 --evaluator --out-dir tf_configs/
    tfdist-opt tf-config --workers h1:2222,h2:2222 --evaluator h3:2222 \
        --task-type evaluator
    tfdist-opt tf-config --check                # validate $TF_CONFIG
    tfdist-opt tf-config --check tf_config.json
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import tempfile
import warnings

from tfdist_opt.launch import local as launcher_lib
from tfdist_opt.cluster import sources
from tfdist_opt.cluster import tf_config as tf_config_lib

PROG = "tfdist-opt tf-config"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Print, write or check the TF_CONFIG of each task. Pick one "
            "source of worker addresses; add --chief/--ps/--evaluator for "
            "other roles."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:" + __doc__.split("Examples:", 1)[1],
    )
    src = p.add_mutually_exclusive_group()
    src.add_argument("--workers", metavar="H:P,H:P", help="comma-separated worker addresses")
    src.add_argument("--local", type=int, metavar="N", help="N workers on free localhost ports")
    src.add_argument(
        "--hostfile", metavar="PATH", help="'host slots=N' lines (DeepSpeed/Horovod format)"
    )
    src.add_argument(
        "--slurm",
        action="store_true",
        help="workers from SLURM_JOB_NODELIST / SLURM_TASKS_PER_NODE; index from SLURM_PROCID",
    )
    src.add_argument(
        "--k8s",
        metavar="NAME.SERVICE[.NS]:PORT",
        help="StatefulSet pods NAME-i.SERVICE:PORT (needs "
        "--replicas); index from $HOSTNAME's ordinal",
    )
    src.add_argument(
        "--check",
        nargs="?",
        const="",
        metavar="PATH",
        help="validate TF_CONFIG from the environment (or PATH) and check this task's port is free",
    )
    p.add_argument("--replicas", type=int, metavar="N", help="StatefulSet replicas (with --k8s)")
    p.add_argument(
        "--port",
        type=int,
        default=sources.DEFAULT_PORT,
        help="first port per host for --hostfile/--slurm, and the "
        "default for --workers entries without one "
        "(default: %(default)s)",
    )
    p.add_argument("--chief", metavar="H:P", help="the chief's address")
    p.add_argument("--ps", metavar="H:P,H:P", help="parameter server addresses")
    p.add_argument(
        "--evaluator",
        nargs="?",
        const="",
        default=None,
        metavar="H:P",
        help="the side-car evaluator's address (TF_CONFIG role "
        "`evaluator`, not part of the training cluster); with "
        "--local, no value picks a free local port",
    )
    p.add_argument(
        "--num-ps",
        type=int,
        default=None,
        metavar="K",
        help="parameter-server cluster from the source's addresses: "
        "task 0 is the chief, the last K are ps tasks, the rest "
        "workers",
    )
    p.add_argument(
        "--task-type",
        default=None,
        choices=tf_config_lib.ROLES,
        help="role of the task to print (default: worker)",
    )
    p.add_argument(
        "--index", type=int, default=None, help="index of the task to print within its role"
    )
    p.add_argument(
        "--format",
        choices=("json", "env"),
        default="json",
        help="json: the TF_CONFIG JSON; env: an `export TF_CONFIG=...` line (default: %(default)s)",
    )
    p.add_argument(
        "--out-dir",
        metavar="DIR",
        help="write one file per task (ROLE-INDEX.json, or .env "
        "with --format env) instead of printing one",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(sys.argv[1:] if argv is None else list(argv))
    except SystemExit as e:
        return int(e.code or 0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            code = _run(args)
        except (ValueError, TypeError, OSError, launcher_lib.LaunchError) as e:
            print(f"{PROG}: error: {e}", file=sys.stderr)
            code = 2 if args.check is None else 1
    for w in caught:
        print(f"{PROG}: warning: {w.message}", file=sys.stderr)
    return code


def _run(args) -> int:
    if args.check is not None:
        return _check(args.check)
    cluster, known_index = _cluster(args)
    task_type = args.task_type or "worker"
    if args.num_ps is not None:
        if args.chief or args.ps:
            raise ValueError(
                "`--num-ps` assigns the chief and ps roles itself. "
                f"Received: --num-ps={args.num_ps} with --chief/--ps. "
                "Expected one or the other."
            )
        evaluator = cluster.get("evaluator")
        cluster, role = sources.assign_ps_roles(cluster.get("worker", []), args.num_ps, known_index)
        if evaluator:
            cluster["evaluator"] = evaluator
        if role is not None and args.task_type is None and args.index is None:
            task_type, args.index = role
        elif args.task_type is None:
            task_type = "chief"
    if args.out_dir:
        _write_all(cluster, args.out_dir, args.format)
        return 0
    index = (
        args.index
        if args.index is not None
        else (
            known_index
            if task_type == "worker"
            else 0
            if task_type in ("chief", "evaluator")
            else None
        )
    )
    if index is None:
        raise ValueError(
            "Missing `--index`: which task's TF_CONFIG to print? Pass --index "
            f"I (0..{len(cluster.get(task_type, [])) - 1}) or --out-dir DIR for "
            "all tasks. Received: --index=None"
        )
    cfg = tf_config_lib.build_tf_config(cluster, task_type, index)
    tf_config_lib.validate_tf_config(cfg)  # emits address warnings
    print(_render(cfg, args.format))
    return 0


def _cluster(args) -> tuple[dict[str, list[str]], int | None]:
    index = None
    if args.workers is not None:
        workers = sources.parse_host_list(args.workers, default_port=args.port)
    elif args.local is not None:
        workers = sources.local_addresses(args.local)
    elif args.hostfile is not None:
        workers = sources.read_hostfile(args.hostfile, port=args.port)
    elif args.slurm:
        src = sources.slurm_cluster(os.environ, port=args.port)
        workers, index = list(src.addresses), src.index
    elif args.k8s is not None:
        if args.replicas is None:
            raise ValueError(
                "Missing `--replicas`: --k8s needs the "
                "StatefulSet's replica count. Received: "
                "--replicas=None"
            )
        src = sources.statefulset_cluster(args.k8s, args.replicas, os.environ)
        workers, index = list(src.addresses), src.index
    else:
        workers = []
    if args.replicas is not None and args.k8s is None:
        raise ValueError(
            f"`--replicas` only applies to --k8s. Received: --replicas={args.replicas}"
        )
    cluster: dict[str, list[str]] = {}
    if args.chief:
        cluster["chief"] = sources.parse_host_list(args.chief, args.port)
    if workers:
        cluster["worker"] = workers
    if args.ps:
        cluster["ps"] = sources.parse_host_list(args.ps, args.port)
    if args.evaluator == "":
        if args.local is None:
            raise ValueError(
                "Missing address for `--evaluator`: only --local picks one "
                "itself. Received: --evaluator (no value). Expected "
                "--evaluator H:P."
            )
        # len(workers) + 1 distinct free ports: one is not a worker's.
        cluster["evaluator"] = [
            next(a for a in sources.local_addresses(len(workers) + 1) if a not in workers)
        ]
    elif args.evaluator:
        cluster["evaluator"] = sources.parse_host_list(args.evaluator, args.port)
    if not cluster:
        raise ValueError(
            "No cluster given: pass one of --workers, --local, --hostfile, "
            "--slurm, --k8s (or --check to validate an existing TF_CONFIG)."
        )
    return cluster, index


def _render(cfg, fmt: str) -> str:
    text = tf_config_lib.dumps_tf_config(cfg)
    return f"export TF_CONFIG={shlex.quote(text)}" if fmt == "env" else text


def _write_all(cluster, out_dir: str, fmt: str) -> None:
    """One file per task; never follows a symlink planted at a task's path.

    Every target is checked first (an existing symlink or non-file is refused,
    naming the path, before anything is written); each file is then written
    to a fresh temp file in `out_dir` and renamed over the target, and a
    rename replaces a link that appears meanwhile instead of writing through
    it.
    """
    os.makedirs(out_dir, exist_ok=True)
    cfgs = tf_config_lib.build_all_tf_configs(cluster)
    if cfgs:
        tf_config_lib.validate_tf_config(cfgs[0])  # warnings, once
    ext = "env" if fmt == "env" else "json"
    paths = [os.path.join(out_dir, f"{c['task']['type']}-{c['task']['index']}.{ext}") for c in cfgs]
    for path in paths:
        if os.path.islink(path):
            raise ValueError(
                f"Refusing to write {path}: it is a symbolic link (to "
                f"{os.readlink(path)!r}); writing would overwrite its target. "
                "Remove the link or choose another --out-dir. Received: "
                f"--out-dir={out_dir!r}"
            )
        if os.path.lexists(path) and not os.path.isfile(path):
            raise ValueError(
                f"Refusing to write {path}: it exists and is not a "
                f"regular file. Received: --out-dir={out_dir!r}"
            )
    for cfg, path in zip(cfgs, paths):
        fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=".tf_config_")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(_render(cfg, fmt) + "\n")
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except BaseException:
            if os.path.lexists(tmp):
                os.remove(tmp)
            raise
        task = cfg["task"]
        address = cfg["cluster"][task["type"]][task["index"]]
        print(f"{path}\t{address}")


def _check(path: str) -> int:
    if path:
        cfg = tf_config_lib.tf_config_from_file(path)
        where = path
    else:
        cfg = tf_config_lib.tf_config_from_env()
        where = "environment"
        if cfg is None:
            print(f"{PROG}: TF_CONFIG is not set: this process would run as a single worker.")
            return 0
    launcher_lib.check_own_port(cfg)
    task = cfg["task"]
    address = cfg["cluster"][task["type"]][task["index"]]
    print(
        f"TF_CONFIG ({where}) OK: {task['type']} {task['index']} of "
        f"{tf_config_lib.num_tasks(cfg)} collective task(s); this task "
        f"listens on {address}"
    )
    return 0
