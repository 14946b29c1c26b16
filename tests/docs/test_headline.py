"""Quoted figures match their result files, and "the defaults" are today's.

Each row of README.md's "Measured speed-ups" table and of the Benchmarks
page's "Headline" table names a result file under `benchmarks/results/` and
a figure with the `summary` key it comes from (`**2.67x** `speedup_vs_peer``);
README's rows also the machine and load it ran on (`(fc-v1272, load 2.4)`).
This test reads each file and checks them, so a figure edited by hand, a file
deleted or a row without its file fails. Any other table row, on any page,
that quotes a figure in that form is checked the same way. The Benchmarks
appendix lists every result file with its machine and load, checked against
the file too (user pages carry no machines or loads).

A figure cannot go stale silently either: a table row or paragraph that
calls what it quotes "the defaults", "every default" or "today's ..." and
names result files passes only if each file records (in its `provenance`,
written by `benchmarks/common.py`) the commit it ran at and `StrategyConfig`
defaults equal to today's. When a default changes, every such claim fails
until it is re-measured or relabelled with the setting it measured.
"""

import ast
import dataclasses
import json
import pathlib
import re

import pytest

from tfdist_opt.strategy.config import StrategyConfig

ROOT = pathlib.Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"

_FIGURE = re.compile(r"\*\*(?P<value>\d+(?:\.(?P<decimals>\d+))?)x\*\* `(?P<key>\w+)`")
_FILE = re.compile(
    r"`(?P<file>[\w.-]+\.json)`(?: \((?P<machine>fc-v\d+), load (?P<load>[\d.]+)\))?"
)


def _table_rows(path: pathlib.Path, heading: str) -> list[tuple[int, str]]:
    """(line number, row) for each data row of the first table under heading."""
    lines = path.read_text().splitlines()
    start = lines.index(heading)
    rows, in_table = [], False
    for number, line in enumerate(lines[start + 1 :], start + 2):
        if line.startswith("#"):
            break
        if line.startswith("|"):
            in_table = True
            if not re.match(r"\|[-| :]+\|$", line) and not line.startswith("| what |"):
                rows.append((number, line))
        elif in_table:
            break
    return rows


_TABLES = [("README.md", "## Measured speed-ups"), ("docs/benchmarks.md", "## Headline")]
_ROWS = [
    (f"{page}:{number}", row)
    for page, heading in _TABLES
    for number, row in _table_rows(ROOT / page, heading)
]


def test_each_table_has_rows():
    for page, heading in _TABLES:
        assert len(_table_rows(ROOT / page, heading)) >= 3, (page, heading)


@pytest.mark.parametrize("where,row", _ROWS, ids=[w for w, _ in _ROWS])
def test_headline_row_matches_its_result_file(where, row):
    figure, source = _FIGURE.search(row), _FILE.search(row)
    assert figure and source, (
        f"{where}: a headline row must hold **X.YYx** `summary_key` and "
        f"`file.json`. Received: {row}"
    )
    path = RESULTS / source["file"]
    assert path.exists(), f"{where}: {source['file']} is not in benchmarks/results/"
    data = json.loads(path.read_text())
    value = data["summary"][figure["key"]]
    decimals = len(figure["decimals"] or "")
    assert round(value, decimals) == float(figure["value"]), (
        f"{where}: {source['file']} holds {figure['key']}={value!r}, the row says {figure['value']}"
    )
    if source["machine"]:
        env = data["environment"]
        assert f"-{source['machine']}-" in env["platform"], (where, env["platform"])
        assert round(env["load_avg_1m"], 1) == float(source["load"]), (where, env["load_avg_1m"])


# ------------------------------------- the appendix: each file's machine, load
APPENDIX = ROOT / "docs" / "benchmarks-appendix.md"
_RESULT_ROW = re.compile(r"\| `(?P<file>[\w.-]+)` \| (?P<machine>[^|]+) \| (?P<load>[^|]+) \|")


def result_file_rows(text: str) -> dict[str, tuple[str, str]]:
    """{file: (machine, load)} from the appendix's "Result files" table."""
    section = text.split("\n## Result files\n", 1)[1].split("\n## ", 1)[0]
    return {
        m["file"]: (m["machine"].strip(), m["load"].strip())
        for m in map(_RESULT_ROW.match, section.splitlines())
        if m
    }


def wrong_machines_or_loads(rows: dict[str, tuple[str, str]], folder=RESULTS) -> list:
    """The rows whose machine or load differs from what their file records."""
    bad = []
    for name, (machine, load) in sorted(rows.items()):
        if not name.endswith(".json"):
            continue
        data = json.loads((folder / name).read_text())
        env = data.get("environment") or {}
        recorded = re.search(r"fc-v\d+", env.get("platform") or "")
        loads = env.get("load_avg_1m", data.get("load_avg_1m"))
        first = loads[0] if isinstance(loads, list) else loads
        want_machine = recorded.group(0) if recorded else "not in the file"
        want_load = "not in the file" if first is None else f"{first:.1f}"
        if not machine.startswith(want_machine) and not machine.endswith(want_machine + ")"):
            bad.append((name, machine, want_machine))
        elif load != want_load:
            bad.append((name, load, want_load))
    return bad


def test_appendix_lists_each_result_files_machine_and_load():
    rows = result_file_rows(APPENDIX.read_text())
    assert len(rows) > 30
    bad = wrong_machines_or_loads(rows)
    assert not bad, f"(file, the appendix says, the file records): {bad}"


def test_a_wrong_machine_or_load_in_the_appendix_is_caught():
    name = "train_peer_mlp_2workers_default_hooked.json"  # fc-v1272, load 2.9
    assert wrong_machines_or_loads({name: ("fc-v1272", "2.9")}) == []
    assert wrong_machines_or_loads({name: ("fc-v1045", "2.9")})
    assert wrong_machines_or_loads({name: ("fc-v1272", "3.9")})


# ------------------------------------------------ every table, every page
PAGES = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]


def _figure_rows():
    for page in PAGES:
        for number, line in enumerate(page.read_text().splitlines(), 1):
            if line.startswith("|") and _FIGURE.search(line):
                yield f"{page.relative_to(ROOT)}:{number}", line


_ALL_ROWS = list(_figure_rows())


@pytest.mark.parametrize("where,row", _ALL_ROWS, ids=[w for w, _ in _ALL_ROWS])
def test_every_quoted_figure_matches_its_result_file(where, row):
    test_headline_row_matches_its_result_file(where, row)


# --------------------------------------------------- "the defaults" claims
_CLAIM = re.compile(r"\b(every default|the defaults|today's)\b", re.I)
_JSON = re.compile(r"`([\w.-]+\.json)`")


def _blocks(text: str):
    """(first line number, text) of each paragraph; a table's rows one by one."""
    block, start = [], 0
    for number, line in enumerate(text.splitlines() + [""], 1):
        if line.startswith("|"):
            if block:
                yield start, " ".join(block)
                block = []
            yield number, line
        elif line.strip():
            if not block:
                start = number
            block.append(line)
        elif block:
            yield start, " ".join(block)
            block = []


def claims(pages=None):
    """[(page:line, block, [result files])] for blocks calling figures "the defaults"."""
    found = []
    for page in PAGES if pages is None else pages:
        for number, block in _blocks(page.read_text()):
            files = [f for f in _JSON.findall(block) if (RESULTS / f).exists()]
            if files and _CLAIM.search(block):
                found.append((f"{page.name}:{number}", block, files))
    return found


def stale(files, today=None, folder=RESULTS):
    """The files among `files` that do not record today's defaults and a commit."""
    today = today or dataclasses.asdict(StrategyConfig())
    bad = []
    for name in files:
        prov = json.loads((folder / name).read_text()).get("provenance") or {}
        if not prov.get("commit") or prov.get("strategy_defaults") != today:
            bad.append(name)
    return bad


def test_figures_called_the_defaults_were_measured_at_todays_defaults():
    bad = [(where, stale(files), block[:200]) for where, block, files in claims() if stale(files)]
    assert not bad, (
        "These call their figures the defaults (or today's), but their files record no "
        "commit or other StrategyConfig defaults than today's (`provenance."
        "strategy_defaults`). Re-run the benchmark at today's defaults, or say which "
        f"setting it measured: {bad}"
    )


def test_a_claim_on_a_file_from_before_a_default_changed_fails(tmp_path):
    """The check itself: a page calling an old file "the defaults" is caught."""
    name = "train_peer_mlp_2workers_default_hooked.json"  # measured before streams
    page = tmp_path / "page.md"
    page.write_text(f"| every default vs the faster peer | `{name}` (fc-v1272, load 2.9) |\n")
    (found,) = claims([page])
    assert found[2] == [name] and stale(found[2]) == [name]
    relabelled = tmp_path / "relabelled.md"
    relabelled.write_text(f"| `collective_streams=0` vs the faster peer | `{name}` |\n")
    assert claims([relabelled]) == []
    today = dataclasses.asdict(StrategyConfig())
    recorded = json.loads((RESULTS / name).read_text())
    assert recorded.get("provenance") is None  # written before provenance existed
    assert stale([name], today) == [name]


def test_every_report_records_commit_strategy_config_and_machine(tmp_path, monkeypatch):
    from benchmarks import common

    monkeypatch.setenv("TFDIST_OPT_GRAD_ACCUM", "2")  # resolved, not the defaults
    out = tmp_path / "demo.json"
    common.write_report("demo", {}, [], {"x": 1.0}, output_json=str(out), environ={})
    prov = json.loads(out.read_text())["provenance"]
    assert re.fullmatch(r"[0-9a-f]{40}", prov["commit"]), prov
    assert prov["strategy_config"]["grad_accum"] == 2
    assert prov["strategy_defaults"] == dataclasses.asdict(StrategyConfig())
    assert prov["machine"]["cpu_count"] and prov["machine"]["platform"], prov["machine"]
    assert stale(["demo.json"], folder=tmp_path) == []  # a fresh run passes the check


# ------------------------------------------- every binary, through provenance
_BENCHMARKS = ROOT / "benchmarks"
# Where `provenance` is made: calling into these proves nothing about a binary.
_REPORT_MODULES = {_BENCHMARKS / "common.py", _BENCHMARKS / "report_files.py"}


def _binaries() -> list[pathlib.Path]:
    """The benchmark programs: files under benchmarks/ that end in `app.run(main)`."""
    return sorted(p for p in _BENCHMARKS.glob("*.py") if "app.run(main)" in p.read_text())


def _imported_benchmark_modules(path: pathlib.Path) -> list[pathlib.Path]:
    """The benchmarks/ files `path` imports (`from benchmarks[.pkg] import x`)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("benchmarks"):
            folder = ROOT.joinpath(*node.module.split("."))
            for alias in node.names:
                for candidate in (folder / f"{alias.name}.py", folder.with_suffix(".py")):
                    if candidate.exists():
                        found.append(candidate)
                        break
    return found


def records_provenance(path: pathlib.Path, seen: set | None = None) -> bool:
    """Whether `path`, or a benchmarks/ module it imports, calls `write_report`
    or `provenance` (the report's commit, resolved StrategyConfig, machine)."""
    seen = set() if seen is None else seen
    if path in seen or path in _REPORT_MODULES:
        return False
    seen.add(path)
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
            if name in ("write_report", "provenance"):
                return True
    return any(records_provenance(m, seen) for m in _imported_benchmark_modules(path))


def test_the_scan_sees_every_benchmark_binary():
    names = {p.name for p in _binaries()}
    assert {"train.py", "link_speed.py", "collectives_in_flight.py", "keras_tests.py"} <= names


@pytest.mark.parametrize("binary", _binaries(), ids=lambda p: p.name)
def test_every_benchmark_binary_writes_provenance(binary):
    assert records_provenance(binary), (
        f"benchmarks/{binary.name} writes results without `provenance` (commit, "
        "resolved StrategyConfig, machine): write them with common.write_report"
    )


def test_a_binary_that_dumps_its_own_json_is_caught(tmp_path):
    script = tmp_path / "bare.py"
    script.write_text(
        "import json\nfrom benchmarks import testbed_lib\n"
        "def main(argv):\n    json.dump({}, open('x', 'w'))\napp.run(main)\n"
    )
    assert not records_provenance(script)
    script.write_text("from benchmarks import common\ncommon.write_report('x', {}, [], {})\n")
    assert records_provenance(script)
