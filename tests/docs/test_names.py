"""Every name, flag and file the pages show exists in the code.

Scans README.md and every page under docs/ for

- dotted `tfdist_opt.` names: each must import (the longest module prefix)
  and resolve attribute by attribute (`getattr`) from there;
- `--flags`: each must be an option of a `tfdist-opt` parser, an
  `add_argument("--...")` of a script under tfdist_opt/ or docs/examples/,
  or an absl flag a benchmark binary defines (`flags.DEFINE_*`, plus the
  `StrategyConfig` flags of `benchmarks/common.py`; `--noNAME` for a
  boolean), unless it belongs to another program (`_OTHER_PROGRAMS`);
- repository paths (`tfdist_opt/...py`, `benchmarks/...`, `docs/examples/...`,
  `configs/...`, `tests/...`) and result file names
  (`train_peer_....json`): each must exist.

A failure lists every bad name with its page and line.
"""

from __future__ import annotations

import ast
import importlib
import pathlib
import re
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "hooks"))
import cli_reference  # noqa: E402  (docs/hooks, put on the path above)

PAGES = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]

# Flags of other programs that the pages show in their commands.
_OTHER_PROGRAMS = {
    "--strict": "mkdocs build",
    "--logdir": "tensorboard",
    "--no-children": "perf report",
    "--sort": "perf report",
    "--stdio": "perf report",
    "--kill-on-bad-exit": "srun",
    "--ntasks-per-node": "srun / sbatch",
    "--nodes": "srun / sbatch",
    "--ntasks": "srun",
    "--gpus-per-task": "srun / sbatch",
    "--signal": "sbatch",
    "--requeue": "sbatch",
    "--open-mode": "sbatch",
    "--full": "scancel",
    "--head": "ray start",
    "--address": "ray start",
    "--num-gpus": "ray start",
    "--pdb": "pytest",
    "--dist": "pytest-xdist",
    "--pid": "py-spy dump",
}

_DOTTED = re.compile(r"(?<![\w.])tfdist_opt(?:\.[A-Za-z_]\w*)+")
_FLAG = re.compile(r"(?<![\w-])--([A-Za-z][\w-]*)")
_PATH = re.compile(
    r"(?<![\w/.=-])((?:tfdist_opt|benchmarks|docs/examples|configs|tests)"
    r"/[\w/.-]*\w\.(?:py|toml|json|txt|csv|png|yml|yaml))\b"
)
_RESULT = re.compile(
    r"`((?:train|allreduce|memory|powersgd|ps|ray_launch|keras_compile|"
    r"model_parallel)_[\w.-]+\.(?:json|csv|png|txt))`"
)


def _occurrences(pattern: re.Pattern, group: int = 0):
    """{match: [page:line, ...]} over every page."""
    found: dict[str, list[str]] = {}
    for page in PAGES:
        for number, line in enumerate(page.read_text().splitlines(), 1):
            for m in pattern.finditer(line):
                found.setdefault(m.group(group), []).append(f"{page.relative_to(ROOT)}:{number}")
    return found


def resolve(dotted: str) -> bool:
    """Whether `dotted` imports, or is an attribute chain of a module that does."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ModuleNotFoundError as e:
            if e.name and not dotted.startswith(e.name):
                raise  # the module exists but needs something missing
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def _script_flags() -> set[str]:
    """`add_argument("--x", ...)` literals in tfdist_opt/ and docs/examples/."""
    flags = set()
    for folder in (ROOT / "tfdist_opt", ROOT / "docs" / "examples"):
        for path in folder.rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "add_argument"
                ):
                    flags.update(
                        a.value
                        for a in node.args
                        if isinstance(a, ast.Constant)
                        and isinstance(a.value, str)
                        and a.value.startswith("--")
                    )
    return flags


def known_flags() -> set[str]:
    flags = cli_reference.cli_flags() | _script_flags() | set(_OTHER_PROGRAMS)
    for name, kind in cli_reference.benchmark_flag_names().items():
        flags.add(f"--{name}")
        if kind in ("bool", "boolean", "strategy"):
            flags.add(f"--no{name}")
    return flags


def _report(bad: dict[str, list[str]], what: str) -> str:
    lines = [f"{len(bad)} {what} shown in the docs do not exist in the code:"]
    lines += [f"  {where}: {name}" for name, places in sorted(bad.items()) for where in places]
    return "\n".join(lines)


def test_every_dotted_name_resolves():
    names = _occurrences(_DOTTED)
    assert len(names) > 20  # the scan still sees the pages
    bad = {name: where for name, where in names.items() if not resolve(name)}
    assert not bad, _report(bad, "tfdist_opt. names")


def test_every_flag_exists():
    flags = {f"--{name}": where for name, where in _occurrences(_FLAG, 1).items()}
    assert len(flags) > 30
    known = known_flags()
    bad = {flag: where for flag, where in flags.items() if flag not in known}
    assert not bad, _report(bad, "--flags")


def test_every_repository_path_and_result_file_exists():
    paths = _occurrences(_PATH, 1)
    bad = {p: where for p, where in paths.items() if not (ROOT / p).exists()}
    results = _occurrences(_RESULT, 1)
    bad.update(
        {
            f"benchmarks/results/{name}": where
            for name, where in results.items()
            if not (ROOT / "benchmarks" / "results" / name).exists()
        }
    )
    assert not bad, _report(bad, "files")


@pytest.mark.parametrize(
    "name,exists",
    [
        ("tfdist_opt.opt_strategy", True),
        ("tfdist_opt.strategy.config.StrategyConfig.load", True),
        ("tfdist_opt.examples.train_cnn", True),
        ("tfdist_opt.opt_strategyy", False),
        ("tfdist_opt.no_such_module.thing", False),
        ("tfdist_opt.strategy.config.NoSuchClass", False),
    ],
)
def test_resolve(name, exists):
    assert resolve(name) is exists


def test_known_flags_cover_each_source():
    known = known_flags()
    assert {"--max-restarts", "--num-ps", "--image"} <= known  # tfdist-opt parsers
    assert {"--epochs", "--log_dir"} <= known  # tfdist_opt.examples.train_cnn
    assert {"--compare", "--output_json", "--powersgd_rank", "--nofold_logs"} <= known
    assert "--no-such-flag" not in known
