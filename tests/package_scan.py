"""One walk over the package's source for the tests that forbid a pattern in it."""

import pathlib
from typing import Callable

import tfdist_opt

PACKAGE = pathlib.Path(tfdist_opt.__file__).parent


def offences_in_package(offences: Callable[[str], list[str]]) -> list[str]:
    """`path:line: name` for every offence `offences(source)` finds in tfdist_opt/."""
    return [
        f"{path.relative_to(PACKAGE.parent)}:{line}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line in offences(path.read_text())
    ]
