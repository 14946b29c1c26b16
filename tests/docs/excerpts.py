"""The expected-output excerpts the pages show under each example's command.

A page shows what an example prints as a `text` block right after the
marker `<!-- output of docs/examples/NAME.py -->` (invisible on the site).
In it, a line `...` stands for lines left out, and `…` inside a line for a
value that changes from run to run (a loss, a hash, a port). The example
tests call `assert_excerpt(NAME, output)`: each other line must occur in
what the example printed, in any order (workers interleave).
"""

from __future__ import annotations

import pathlib
import re

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs"
_BLOCK = re.compile(
    r"<!-- output of docs/examples/(?P<name>\w+)\.py -->\n"
    r"```text\n(?P<body>.*?)^```$",
    re.M | re.S,
)


def excerpts() -> dict[str, list[tuple[str, list[str]]]]:
    """{example name: [(page, lines), ...]} over every page."""
    found: dict[str, list[tuple[str, list[str]]]] = {}
    for page in sorted(DOCS.rglob("*.md")):
        for m in _BLOCK.finditer(page.read_text()):
            lines = [ln for ln in m["body"].splitlines() if ln.strip()]
            found.setdefault(m["name"], []).append((str(page.relative_to(DOCS.parent)), lines))
    return found


def _pattern(line: str) -> re.Pattern:
    return re.compile(".+?".join(re.escape(part) for part in line.split("…")))


def missing_lines(lines: list[str], output: str) -> list[str]:
    """The excerpt's lines that do not occur in `output`."""
    return [ln for ln in lines if ln.strip() != "..." and not _pattern(ln).search(output)]


def assert_excerpt(name: str, output: str) -> None:
    """Each page's excerpt for docs/examples/`name`.py occurs in `output`."""
    shown = excerpts().get(name)
    assert shown, f"no page shows the output of docs/examples/{name}.py"
    for page, lines in shown:
        missing = missing_lines(lines, output)
        assert not missing, (
            f"{page}: the output of docs/examples/{name}.py lacks "
            f"{missing}. Output:\n{output[-3000:]}"
        )
