"""`tfdist-opt bench train|allreduce|input [FLAGS...]`: run a benchmark binary.

The binaries live in `benchmarks/` at the repository root (absl programs,
not part of the installed package); this command finds them beside the
`tfdist_opt` package (a source checkout or an editable install) and runs
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

PROG = "tfdist-opt bench"
BENCHMARKS_DIR_ENV = "TFDIST_OPT_BENCHMARKS_DIR"

# name -> (file under benchmarks/, one-line help)
BINARIES = {
    "train": ("train.py", "model training: examples/sec, opt vs TF defaults"),
    "allreduce": ("allreduce.py", "all-reduce: packing and compression vs TF defaults"),
    "input": ("input_pipeline.py", "tf.data: our pipeline vs a naive one"),
}


def benchmarks_dir(environ=None) -> pathlib.Path:
    """`$TFDIST_OPT_BENCHMARKS_DIR`, else `benchmarks/` beside the package.

    Raises:
        FileNotFoundError: no such directory (e.g. a non-editable install,
            which does not ship the binaries).
    """
    environ = os.environ if environ is None else environ
    override = environ.get(BENCHMARKS_DIR_ENV)
    path = (pathlib.Path(override) if override else
            pathlib.Path(__file__).resolve().parents[2] / "benchmarks")
    if not path.is_dir():
        raise FileNotFoundError(
            f"{PROG}: the benchmark binaries were not found. Received: {path} "
            f"({'from ' + BENCHMARKS_DIR_ENV if override else 'beside the package'}"
            "). Expected a source checkout with benchmarks/ next to tfdist_opt/ "
            "(install with `pip install -e .`), or set "
            f"{BENCHMARKS_DIR_ENV}=/path/to/benchmarks.")
    return path


def command(name: str, flags: list[str], environ=None) -> list[str]:
    """The argv that runs benchmark `name` with `flags`.

    Raises:
        ValueError: an unrecognized benchmark name (the valid ones listed).
        FileNotFoundError: the binaries or this binary are missing.
    """
    if name not in BINARIES:
        raise ValueError(f"Unrecognized benchmark: {name!r}. Expected one of: "
                         f"{', '.join(BINARIES)}.")
    path = benchmarks_dir(environ) / BINARIES[name][0]
    if not path.is_file():
        raise FileNotFoundError(f"{PROG}: {path} is missing. Expected the "
                                f"{name!r} benchmark binary there.")
    return [sys.executable, str(path), *flags]


def usage() -> str:
    lines = [f"usage: {PROG} BENCHMARK [FLAGS...]", "", "benchmarks:"]
    lines += [f"  {n:<10} {h}  (benchmarks/{f})" for n, (f, h) in BINARIES.items()]
    lines += ["", f"Flags go to the binary unchanged; `{PROG} BENCHMARK --help` "
              "lists them.", "Under the launcher: tfdist-opt launch -n 2 -- "
              f"{PROG} train --compare=baseline"]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    argv = list(argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if argv else 2
    try:
        cmd = command(argv[0], argv[1:])
    except (ValueError, FileNotFoundError) as e:
        print(f"{PROG}: {e}\n\n{usage()}" if isinstance(e, ValueError)
              else str(e), file=sys.stderr)
        return 2
    return _exec(cmd)


def _exec(cmd: list[str]) -> int:
    """Replaces this process with `cmd` (returns only in tests)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(cmd[0], cmd)
    return 0  # pragma: no cover - execv does not return
