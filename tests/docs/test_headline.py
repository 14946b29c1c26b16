"""The headline tables quote their result files.

Each row of README.md's "Measured speed-ups" table and of the Benchmarks
page's "Headline" table names a result file under `benchmarks/results/`, a
figure with the `summary` key it comes from (`**2.67x** `speedup_vs_peer``),
and the machine and load it ran on (`(fc-v1272, load 2.4)`). This test reads
each file and checks all three, so a figure edited by hand, a file deleted or
a row without its file fails.
"""

import json
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"

_FIGURE = re.compile(r"\*\*(?P<value>\d+(?:\.(?P<decimals>\d+))?)x\*\* `(?P<key>\w+)`")
_FILE = re.compile(r"`(?P<file>[\w.-]+\.json)` \((?P<machine>fc-v\d+), load (?P<load>[\d.]+)\)")


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
        f"`file.json` (fc-vNNNN, load L). Received: {row}"
    )
    path = RESULTS / source["file"]
    assert path.exists(), f"{where}: {source['file']} is not in benchmarks/results/"
    data = json.loads(path.read_text())
    value = data["summary"][figure["key"]]
    decimals = len(figure["decimals"] or "")
    assert round(value, decimals) == float(figure["value"]), (
        f"{where}: {source['file']} holds {figure['key']}={value!r}, the row says {figure['value']}"
    )
    env = data["environment"]
    assert f"-{source['machine']}-" in env["platform"], (where, env["platform"])
    assert round(env["load_avg_1m"], 1) == float(source["load"]), (where, env["load_avg_1m"])
