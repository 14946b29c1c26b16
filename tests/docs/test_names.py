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
    assert {"--compare", "--output_json", "--powersgd_rank", "--num_batches"} <= known
    assert "--no-such-flag" not in known


# ------------------------------------------- recommended names, documented
_API = ROOT / "docs" / "reference" / "api.md"
# Names the guides recommend by their bare name (the dotted ones are found by
# the scan below).
_BARE_RECOMMENDED = {
    "tfdist_opt.data.sources.DatasetFnSource",
    "tfdist_opt.parameter_server.backup.BackupAndRestore",  # `ps.BackupAndRestore`
    "tfdist_opt.gradients.autotune.auto_compression.choose_compression",
    "tfdist_opt.gradients.autotune.auto_compression.measure_link",
    "tfdist_opt.strategy.saving.file_writers.is_writer",
}


def _defining_name(dotted: str) -> str | None:
    """`module.qualname` of the class or function `dotted` names, else None."""
    import inspect  # pylint: disable=g-import-not-at-top

    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr, None)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            return f"{obj.__module__}.{obj.__qualname__}"
        return None
    return None


def undocumented(pages, api_text: str) -> dict[str, list[str]]:
    """Classes and functions `pages` name that api_text has no `:::` entry for."""
    entries = set(re.findall(r"^::: ([\w.]+)", api_text, re.M))
    found: dict[str, list[str]] = {n: ["recommended by name"] for n in _BARE_RECOMMENDED}
    for page in pages:
        for number, line in enumerate(page.read_text().splitlines(), 1):
            for m in _DOTTED.finditer(line):
                name = _defining_name(m.group(0))
                if name:
                    found.setdefault(name, []).append(f"{page.relative_to(ROOT)}:{number}")
    return {name: where for name, where in found.items() if name not in entries}


_USER_PAGES = [p for p in PAGES if not p.is_relative_to(ROOT / "docs" / "internals")]


def test_every_class_and_function_the_guides_name_is_in_the_api_reference():
    bad = undocumented(_USER_PAGES, _API.read_text())
    assert not bad, "Named by the guides, without a `:::` entry in docs/reference/api.md:\n" + (
        "\n".join(f"  {name} ({', '.join(where)})" for name, where in sorted(bad.items()))
    )


_BARE_CLASS = re.compile(r"`(?:tfdist_opt\.[\w.]*\.)?([A-Z]\w*)\b")


def public_classes() -> dict[str, set[str]]:
    """{class name: {module.Class, ...}} of the classes tfdist_opt's public modules define."""
    found: dict[str, set[str]] = {}
    for path in (ROOT / "tfdist_opt").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if any(p.startswith("_") and p != "__init__" for p in parts):
            continue
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                found.setdefault(node.name, set()).add(f"{module}.{node.name}")
    return found


def undocumented_bare_classes(pages, api_text: str) -> dict[str, list[str]]:
    """Classes `pages` name bare (`BackupError`, `Topology(...)`) without a `:::` entry."""
    entries = set(re.findall(r"^::: ([\w.]+)", api_text, re.M))
    classes = public_classes()
    bad: dict[str, list[str]] = {}
    for page in pages:
        rel = page.relative_to(ROOT) if page.is_relative_to(ROOT) else page.name
        for number, line in enumerate(page.read_text().splitlines(), 1):
            for m in _BARE_CLASS.finditer(line):
                defined = classes.get(m.group(1))
                if defined and not defined & entries:
                    bad.setdefault(m.group(1), []).append(f"{rel}:{number}")
    return bad


def test_every_class_the_guides_name_bare_is_in_the_api_reference():
    """An error users catch or a class a guide recommends, named without its module."""
    bad = undocumented_bare_classes(_USER_PAGES, _API.read_text())
    assert not bad, "Named by the guides, without a `:::` entry in docs/reference/api.md:\n" + (
        "\n".join(f"  {name} ({', '.join(where)})" for name, where in sorted(bad.items()))
    )


def test_every_top_level_export_is_in_the_api_reference():
    import tfdist_opt  # pylint: disable=g-import-not-at-top

    entries = set(re.findall(r"^::: ([\w.]+)", _API.read_text(), re.M))
    missing = [n for n in tfdist_opt.__all__ if _defining_name(f"tfdist_opt.{n}") not in entries]
    assert not missing, f"tfdist_opt.__all__ names without a `:::` entry in api.md: {missing}"


def test_a_bare_class_missing_from_the_api_reference_is_caught(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("Catch `RestoreMismatchError: ...` or `Topology(...)`.\n")
    api = _API.read_text()
    assert undocumented_bare_classes([page], api) == {}
    api = api.replace("::: tfdist_opt.callbacks.restore_agreement.RestoreMismatchError\n", "")
    assert list(undocumented_bare_classes([page], api)) == ["RestoreMismatchError"]


def test_a_name_missing_from_the_api_reference_is_caught():
    api = _API.read_text().replace("::: tfdist_opt.strategy.saving.file_writers.is_writer\n", "")
    assert "tfdist_opt.strategy.saving.file_writers.is_writer" in undocumented([], api)


# Pages for contributors, where test files are what is being described.
_CONTRIBUTOR_PAGES = ("docs/contributing.md", "docs/benchmarks-appendix.md", "docs/internals/")


def _user_page_lines(pattern: str) -> dict:
    """{line: [page:number, ...]} of user pages whose lines match `pattern`."""
    found = {}
    for page in sorted((ROOT / "docs").rglob("*.md")):
        rel = str(page.relative_to(ROOT))
        if rel.startswith(_CONTRIBUTOR_PAGES):
            continue
        for number, line in enumerate(page.read_text().splitlines(), 1):
            if re.search(pattern, line):
                found.setdefault(line.strip()[:80], []).append(f"{rel}:{number}")
    return found


def _listing(found: dict) -> str:
    return "\n".join(
        f"  {where}: {line}" for line, places in sorted(found.items()) for where in places
    )


def test_user_pages_carry_no_lab_notes():
    """Machines (kernel builds) and load averages stay in the Benchmarks appendix."""
    bad = _user_page_lines(r"\bfc-v\d+|\bload (?:average )?\d")
    assert not bad, "lab notes on user pages (link to the Benchmarks page instead):\n" + _listing(
        bad
    )


def test_user_pages_say_what_is_tested_without_test_paths():
    """A pip user has no tests/ folder: user pages say what is tested instead."""
    bad = _user_page_lines(r"(?<![\w/.-])tests/\w")
    assert not bad, "tests/ paths on user pages (say what is tested instead):\n" + _listing(bad)
