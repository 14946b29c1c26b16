"""`tfdist-opt k8s`: print a Kubeflow `TFJob` manifest. Never imports TF.

Examples:
    tfdist-opt k8s --workers 4 --image registry/trainer:1.0 -- python train.py
    tfdist-opt k8s --workers 2 --gpus 8 --max-restarts 3 --image I -- python train.py | kubectl apply -f -
    tfdist-opt k8s --workers 2 --ps 1 --image I -o tfjob.yaml -- python ps_train.py
"""

from __future__ import annotations

import argparse
import sys

from tfdist_opt.cluster import k8s

PROG = "tfdist-opt k8s"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, usage=f"{PROG} --workers N [--ps P] --image I [OPTIONS] -- CMD [ARGS...]",
        description=(
            "Print a Kubeflow Training Operator TFJob (kubeflow.org/v1) that "
            "runs CMD in N Worker pods; the operator sets each pod's "
            "TF_CONFIG, which opt_strategy() reads. Apply with "
            "`kubectl apply -f -`."),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:" + __doc__.split("Examples:", 1)[1])
    p.add_argument("--workers", type=int, required=True, metavar="N",
                   help="Worker replicas")
    p.add_argument("--ps", type=int, default=0, metavar="P",
                   help="PS replicas (adds the Chief replica the "
                        "parameter-server kind of opt_strategy() needs: the "
                        "chief trains, workers and ps tasks serve) "
                        "(default: %(default)s)")
    p.add_argument("--image", required=True, metavar="I", help="container image")
    p.add_argument("--name", default="trainer",
                   help="TFJob name; pods are NAME-worker-I (default: %(default)s)")
    p.add_argument("--namespace", default=None, help="Kubernetes namespace")
    p.add_argument("--port", type=int, default=k8s.DEFAULT_PORT,
                   help="tfjob-port of every replica (default: %(default)s)")
    p.add_argument("--gpus", type=int, default=0, metavar="G",
                   help="nvidia.com/gpu limit per Worker pod (default: %(default)s)")
    p.add_argument("--max-restarts", type=int, default=0, metavar="R",
                   help="runPolicy.backoffLimit; > 0 restarts failed pods "
                        "(restartPolicy OnFailure) (default: %(default)s)")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="environment for every container (repeatable), e.g. "
                        "TFDIST_OPT_ALL_REDUCE=ring")
    p.add_argument("-o", "--output", default=None, metavar="PATH",
                   help="write the manifest there instead of stdout")
    return p


def _parse_env(items: list[str]) -> dict[str, str]:
    env = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise ValueError("Invalid value for `--env`: expected NAME=VALUE. "
                             f"Received: --env {item!r}")
        env[name] = value
    return env


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--" in argv:
        i = argv.index("--")
        options, command = argv[:i], argv[i + 1:]
    else:
        options, command = argv, []
    try:
        args = build_parser().parse_args(options)
    except SystemExit as e:
        return int(e.code or 0)
    if not command:
        print(f"{PROG}: error: nothing to run: put the command after `--`, e.g. "
              f"`{PROG} --workers 2 --image I -- python train.py`", file=sys.stderr)
        return 2
    try:
        job = k8s.build_tfjob(args.name, args.image, command, args.workers,
                              ps=args.ps, namespace=args.namespace, port=args.port,
                              gpus=args.gpus, max_restarts=args.max_restarts,
                              env=_parse_env(args.env))
    except ValueError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    text = ("# Kubeflow Training Operator TFJob written by `tfdist-opt k8s`; the\n"
            "# operator sets TF_CONFIG in every pod. Apply: kubectl apply -f FILE\n"
            + k8s.to_yaml(job))
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
        print(f"{PROG}: wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
