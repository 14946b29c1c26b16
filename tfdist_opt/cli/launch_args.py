"""The parser of `tfdist-opt launch` (its flags, help and examples).

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
import re

from tfdist_opt.cluster import sources
from tfdist_opt.launch import local as launcher_lib

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
