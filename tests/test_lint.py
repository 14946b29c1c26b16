"""`ruff check` and `ruff format --check` (configured in pyproject.toml) find nothing in the tree."""

import pathlib
import shutil
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent


def _ruff():
    """The ruff next to this interpreter (the `test` extra installs it), else on PATH."""
    here = pathlib.Path(sys.executable).with_name("ruff")
    found = str(here) if here.exists() else shutil.which("ruff")
    if found is None:
        pytest.fail('ruff is not installed: pip install -e ".[test]" installs it')
    return found


def test_ruff_check_finds_nothing():
    p = subprocess.run(
        [_ruff(), "check", "--no-cache", "--output-format", "concise", "."],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-2000:]


def test_ruff_format_leaves_the_tree_unchanged():
    p = subprocess.run(
        [_ruff(), "format", "--no-cache", "--check", "."],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stdout[-6000:] + p.stderr[-2000:]
