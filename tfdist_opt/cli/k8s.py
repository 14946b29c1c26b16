"""`tfdist-opt k8s`: print Kubernetes manifests for a job. Never imports TF.

Examples:
    tfdist-opt k8s --kind trainjob --workers 4 --image registry/trainer:1.0 -- python train.py | kubectl apply -f -
    tfdist-opt k8s --kind rayjob --workers 2 --gpus-per-worker 1 --image I -- python -m tfdist_opt.examples.train_cnn
    tfdist-opt k8s --kind tfjob --workers 2 --gpus-per-worker 8 --max-restarts 3 \\
        --backup-dir /backups --backup-claim trainer-backups --image I -- python train.py
    tfdist-opt k8s --workers 2 --ps 1 --image I -o tfjob.yaml -- python ps_train.py  # no --kind: tfjob
"""

from __future__ import annotations

import argparse
import re
import sys
import warnings

from tfdist_opt.cluster import k8s
from tfdist_opt.cluster import kuberay
from tfdist_opt.cluster import trainjob

PROG = "tfdist-opt k8s"
DEFAULT_KIND = "tfjob"  # what the command wrote before --kind existed
_HEADERS = {
    "tfjob": "# Kubeflow Training Operator TFJob (kubeflow.org/v1, training-operator 1.9)\n"
    "# written by `tfdist-opt k8s`; the operator sets TF_CONFIG in every pod.\n",
    "trainjob": "# Kubeflow Trainer v2 TrainJob and its own TensorFlow TrainingRuntime\n"
    "# (trainer.kubeflow.org/v1alpha1, both namespaced) written by `tfdist-opt k8s`;\n"
    "# opt_strategy() builds each pod's TF_CONFIG from its JobSet index.\n",
    "rayjob": "# KubeRay RayJob (ray.io/v1) written by `tfdist-opt k8s`; the entrypoint\n"
    "# `tfdist-opt launch --ray auto` gives each Ray Train worker its TF_CONFIG.\n",
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        usage=f"{PROG} [--kind tfjob|trainjob|rayjob] --workers N --image I "
        "[OPTIONS] -- CMD [ARGS...]",
        description=(
            "Print the manifests that run CMD on N pods; apply with "
            "`kubectl apply -f -`. Kinds: `trainjob`, a Kubeflow Trainer v2 "
            "TrainJob plus its own namespaced TensorFlow TrainingRuntime (Kubeflow "
            "ships none), whose pods' TF_CONFIG opt_strategy() builds from the JobSet "
            "pod index; `rayjob`, a KubeRay RayJob running `tfdist-opt launch "
            "--ray auto`; `tfjob`, a Kubeflow Training Operator TFJob "
            "(kubeflow.org/v1, training-operator 1.9), the default, whose "
            "operator sets TF_CONFIG."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:" + __doc__.split("Examples:", 1)[1],
    )
    p.add_argument(
        "--kind",
        default=None,
        metavar="KIND",
        help=f"tfjob, trainjob or rayjob (default: {DEFAULT_KIND}, with a note on stderr)",
    )
    p.add_argument("--workers", required=True, metavar="N", help="worker pods")
    p.add_argument("--image", required=True, metavar="I", help="container image")
    p.add_argument(
        "--gpus-per-worker",
        "--gpus",
        dest="gpus",
        default="0",
        metavar="K",
        help="nvidia.com/gpu limit per worker pod (default: %(default)s)",
    )
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="environment for every container (repeatable), e.g. TFDIST_OPT_ALL_REDUCE=ring",
    )
    p.add_argument(
        "--backup-dir",
        default=None,
        metavar="PATH",
        help="mount a backup volume at PATH in every pod; give the "
        "program the same path (DistributedBackupAndRestore)",
    )
    p.add_argument(
        "--backup-claim",
        default=None,
        metavar="PVC",
        help="PersistentVolumeClaim for --backup-dir (ReadWriteMany); "
        "without it an emptyDir, lost with its pod (warned; "
        "refused for rayjob)",
    )
    p.add_argument(
        "--max-restarts",
        default="0",
        metavar="R",
        help="restarts of the whole group after a failure (default: %(default)s)",
    )
    p.add_argument("--name", default="trainer", help="job name (default: %(default)s)")
    p.add_argument("--namespace", default=None, help="Kubernetes namespace")
    p.add_argument(
        "--port",
        default=str(k8s.DEFAULT_PORT),
        help="TF server port of every worker, tfjob and trainjob (default: %(default)s)",
    )
    p.add_argument(
        "--ps",
        default="0",
        metavar="P",
        help="tfjob only: parameter-server replicas, plus the Chief "
        "that parameter-server training needs (opt_strategy() "
        "builds the parameter-server strategy from the "
        "operator's TF_CONFIG on the Chief; on worker and ps "
        "pods it serves, then exits 0) (default: %(default)s)",
    )
    p.add_argument(
        "--runtime",
        default=None,
        metavar="NAME",
        help="trainjob only: the name of the TrainingRuntime written (in the "
        "job's namespace, holding this job's port, backup volume and "
        "restarts) and referenced (default: the job's --name)",
    )
    p.add_argument(
        "--ray-version",
        default=kuberay.DEFAULT_RAY_VERSION,
        metavar="X.Y.Z",
        help="rayjob only: the image's Ray version (default: %(default)s)",
    )
    p.add_argument(
        "--cpus-per-worker",
        default=str(kuberay.DEFAULT_CPUS),
        metavar="C",
        help="rayjob only: CPUs of each worker pod, requested and limited; "
        "Ray counts one per pod so one Ray Train worker lands per pod "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--memory-per-worker",
        default=kuberay.DEFAULT_MEMORY,
        metavar="Q",
        help="rayjob only: memory of each worker pod, a Kubernetes quantity "
        "such as 16Gi (default: %(default)s)",
    )
    p.add_argument(
        "-o",
        "--output",
        default=None,
        metavar="PATH",
        help="write the manifests there instead of stdout",
    )
    return p


def _int(flag: str, text: str, minimum: int) -> int:
    if not re.fullmatch(r"\s*-?\d+\s*", text) or int(text) < minimum:
        raise ValueError(
            f"Invalid value for `{flag}`: expected an int >= {minimum}. Received: {flag}={text!r}"
        )
    return int(text)


def parse_env(items: list[str]) -> dict[str, str]:
    """`--env NAME=VALUE` items as a dict; a malformed one is a named error."""
    env = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(
                "Invalid value for `--env`: expected NAME=VALUE with a "
                f"shell-style NAME. Received: --env {item!r}"
            )
        env[name] = value
    return env


def _tfjob(args, command):
    return [
        k8s.build_tfjob(
            args.name,
            args.image,
            command,
            _int("--workers", args.workers, 1),
            ps=_int("--ps", args.ps, 0),
            namespace=args.namespace,
            port=_int("--port", args.port, 1),
            gpus=_int("--gpus-per-worker", args.gpus, 0),
            max_restarts=_int("--max-restarts", args.max_restarts, 0),
            env=parse_env(args.env),
            backup_dir=args.backup_dir,
            backup_claim=args.backup_claim,
        )
    ]


def _trainjob(args, command):
    runtime_name = args.name if args.runtime is None else args.runtime
    job = trainjob.build_trainjob(
        args.name,
        args.image,
        command,
        _int("--workers", args.workers, 1),
        runtime=runtime_name,
        namespace=args.namespace,
        gpus=_int("--gpus-per-worker", args.gpus, 0),
        env=parse_env(args.env),
    )
    runtime = trainjob.build_tf_runtime(
        args.image,
        runtime_name,
        namespace=args.namespace,
        port=_int("--port", args.port, 1),
        max_restarts=_int("--max-restarts", args.max_restarts, 0),
        backup_dir=args.backup_dir,
        backup_claim=args.backup_claim,
    )
    return [runtime, job]


def _rayjob(args, command):
    return [
        kuberay.build_rayjob(
            args.name,
            args.image,
            command,
            _int("--workers", args.workers, 1),
            namespace=args.namespace,
            gpus=_int("--gpus-per-worker", args.gpus, 0),
            max_restarts=_int("--max-restarts", args.max_restarts, 0),
            env=parse_env(args.env),
            backup_dir=args.backup_dir,
            backup_claim=args.backup_claim,
            ray_version=args.ray_version,
            cpus=_int("--cpus-per-worker", args.cpus_per_worker, 1),
            memory=args.memory_per_worker,
        )
    ]


KINDS = {"tfjob": _tfjob, "trainjob": _trainjob, "rayjob": _rayjob}
# Flags one kind uses, refused (not ignored) with the others.
_ONLY = {
    "--ps": ("ps", "0", "tfjob"),
    "--runtime": ("runtime", None, "trainjob"),
    "--ray-version": ("ray_version", kuberay.DEFAULT_RAY_VERSION, "rayjob"),
    "--cpus-per-worker": ("cpus_per_worker", str(kuberay.DEFAULT_CPUS), "rayjob"),
    "--memory-per-worker": ("memory_per_worker", kuberay.DEFAULT_MEMORY, "rayjob"),
    "--port": ("port", str(k8s.DEFAULT_PORT), "tfjob trainjob"),
}


def manifests(args, command: list[str]) -> tuple[str, list[dict]]:
    """The kind and its manifests (dicts); ValueError on bad input."""
    kind = DEFAULT_KIND if args.kind is None else args.kind
    if kind not in KINDS:
        raise ValueError(
            f"Unrecognized `--kind`: expected one of {', '.join(KINDS)}. Received: --kind={kind!r}"
        )
    for flag, (dest, default, kinds) in _ONLY.items():
        if getattr(args, dest) != default and kind not in kinds.split():
            raise ValueError(
                f"`{flag}` applies to --kind {' or '.join(kinds.split())}. "
                f"Received: {flag}={getattr(args, dest)!r} with --kind {kind}"
            )
    return kind, KINDS[kind](args, command)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--" in argv:
        i = argv.index("--")
        options, command = argv[:i], argv[i + 1 :]
    else:
        options, command = argv, []
    try:
        args = build_parser().parse_args(options)
    except SystemExit as e:
        return int(e.code or 0)
    if not command:
        print(
            f"{PROG}: error: nothing to run: put the command after `--`, e.g. "
            f"`{PROG} --kind trainjob --workers 2 --image I -- python train.py`",
            file=sys.stderr,
        )
        return 2
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            kind, docs = manifests(args, command)
    except ValueError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    if args.kind is None:
        print(
            f"{PROG}: note: no --kind: writing a TFJob (kubeflow.org/v1), served "
            "only by the Kubeflow training-operator 1.9 branch; for Kubeflow "
            "Trainer v2 use --kind trainjob, for KubeRay --kind rayjob",
            file=sys.stderr,
        )
    for w in caught:
        print(f"{PROG}: warning: {w.message}", file=sys.stderr)
    text = _HEADERS[kind] + "---\n".join(k8s.to_yaml(d) for d in docs)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
        print(f"{PROG}: wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
