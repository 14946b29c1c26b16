"""`tfdist-opt` command line: `info | tf-config | launch | bench | k8s | memory`.

Each subcommand lives with its concept and exposes `main(argv) -> int`;
this module only dispatches (lazily, so `tfdist-opt tf-config` never
imports TensorFlow).
"""

from __future__ import annotations

import importlib
import sys

# subcommand -> (module, one-line help)
_COMMANDS = {
    "info": (
        "tfdist_opt.cli.info",
        "versions, devices and the strategy opt_strategy() would build",
    ),
    "tf-config": ("tfdist_opt.cli.tf_config", "print or write TF_CONFIG for each task"),
    "launch": ("tfdist_opt.cli.launch", "run N local workers with generated TF_CONFIG"),
    "bench": ("tfdist_opt.cli.bench", "run a benchmark binary (train | allreduce | input)"),
    "k8s": (
        "tfdist_opt.cli.k8s",
        "print Kubernetes manifests: Trainer v2 TrainJob, KubeRay RayJob, TFJob",
    ),
    "memory": (
        "tfdist_opt.cli.memory",
        "per-replica bytes of a model under each memory setting; what fits",
    ),
}


def _usage() -> str:
    lines = ["usage: tfdist-opt COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name:<10} {help_}" for name, (_, help_) in _COMMANDS.items()]
    lines += ["", "Run `tfdist-opt COMMAND --help` for a command's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in _COMMANDS:
        print(
            f"tfdist-opt: unrecognized command {name!r}. Expected one of: "
            f"{', '.join(_COMMANDS)}.\n\n{_usage()}",
            file=sys.stderr,
        )
        return 2
    module_name = _COMMANDS[name][0]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name != module_name:
            raise
        print(f"tfdist-opt: command {name!r} is not available in this build.", file=sys.stderr)
        return 2
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
