"""`tfdist-opt bench train|allreduce|input [FLAGS...]`: run a benchmark binary.

The binaries live in `benchmarks/` at the repository root (absl programs);
a built wheel carries them as `tfdist_opt/_data/benchmarks/`. This command
finds them (`tfdist_opt.resources`: the source checkout first, then the
installed wheel's copy) and runs
the chosen one with the same flags, in place of this process (`exec`), so
`tfdist-opt launch -n 2 -- tfdist-opt bench train ...` behaves exactly like
`tfdist-opt launch -n 2 -- python benchmarks/train.py ...` (same TF_CONFIG,
same signals, same exit status). Never imports TensorFlow.

Example:
    tfdist-opt bench train --model=cnn_small --compare=baseline
    tfdist-opt bench allreduce --mode=sweep --output_json=/tmp/ar.json
    tfdist-opt bench input --help
"""

from __future__ import annotations

import os
import pathlib
import sys

from tfdist_opt import config_files
from tfdist_opt import resources

PROG = "tfdist-opt bench"
BENCHMARKS_DIR_ENV = config_files.BENCHMARKS_DIR_ENV  # not a config field

# name -> (file under benchmarks/, one-line help)
BINARIES = {
    "train": ("train.py", "model training: examples/sec, opt vs TF defaults"),
    "allreduce": ("allreduce.py", "all-reduce: packing and compression vs TF defaults"),
    "input": ("input_pipeline.py", "tf.data: our pipeline vs a naive one"),
}


def benchmarks_dir(environ=None) -> pathlib.Path:
    """`$TFDIST_OPT_BENCHMARKS_DIR`, else the checkout's or the wheel's copy.

    Raises:
        FileNotFoundError: no such directory.
    """
    environ = os.environ if environ is None else environ
    override = environ.get(BENCHMARKS_DIR_ENV)
    if override:
        path = pathlib.Path(override)
        where = f"{path} (from {BENCHMARKS_DIR_ENV})"
    else:
        path = resources.data_dir("benchmarks")
        where = resources.describe_locations("benchmarks")
    if path is None or not path.is_dir():
        raise FileNotFoundError(
            f"{PROG}: the benchmark binaries were not found. Received: "
            f"{where}. Expected a source checkout with benchmarks/ next to "
            "tfdist_opt/, or an install built from one (`pip install .` "
            "ships them), or set "
            f"{BENCHMARKS_DIR_ENV}=/path/to/benchmarks."
        )
    return path


def command(name: str, flags: list[str], environ=None) -> list[str]:
    """The argv that runs benchmark `name` with `flags`.

    Raises:
        ValueError: an unrecognized benchmark name (the valid ones listed).
        FileNotFoundError: the binaries or this binary are missing.
    """
    if name not in BINARIES:
        raise ValueError(
            f"Unrecognized benchmark: {name!r}. Expected one of: {', '.join(BINARIES)}."
        )
    path = benchmarks_dir(environ) / BINARIES[name][0]
    if not path.is_file():
        raise FileNotFoundError(
            f"{PROG}: {path} is missing. Expected the {name!r} benchmark binary there."
        )
    return [sys.executable, str(path), *flags]


def usage() -> str:
    lines = [f"usage: {PROG} BENCHMARK [FLAGS...]", "", "benchmarks:"]
    lines += [f"  {n:<10} {h}  (benchmarks/{f})" for n, (f, h) in BINARIES.items()]
    lines += [
        "",
        f"Flags go to the binary unchanged; `{PROG} BENCHMARK --help` lists them.",
        f"Under the launcher: tfdist-opt launch -n 2 -- {PROG} train --compare=baseline",
    ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    argv = list(argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if argv else 2
    try:
        cmd = command(argv[0], argv[1:])
    except (ValueError, FileNotFoundError) as e:
        print(f"{PROG}: {e}\n\n{usage()}" if isinstance(e, ValueError) else str(e), file=sys.stderr)
        return 2
    return _exec(cmd)


def _exec(cmd: list[str]) -> int:
    """Replaces this process with `cmd` (returns only in tests)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(cmd[0], cmd)
    return 0  # pragma: no cover - execv does not return
