"""README.md's "Supported versions" table is what the version matrix last found."""

import importlib.machinery
import importlib.util
import json
import pathlib

REPO = pathlib.Path(__file__).resolve().parent.parent


def _script():
    path = REPO / ".ci" / "supported_versions"
    loader = importlib.machinery.SourceFileLoader("_supported_versions", str(path))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_readme_table_equals_the_matrix_results():
    script = _script()
    results = json.loads((REPO / ".ci" / "version_matrix.json").read_text())
    readme = (REPO / "README.md").read_text()
    assert script.render(readme, results) == readme, (
        "README.md's table is stale: run .ci/supported_versions"
    )
    # Every cell of the matrix has its row, with its result.
    for cell in results["cells"]:
        row = [
            ln
            for ln in readme.splitlines()
            if ln.startswith(f"| {cell.get('tensorflow') or cell['tensorflow_requested']} ")
            and f"| {cell.get('keras') or cell['keras_requested']}" in ln
        ]
        assert len(row) == 1, cell["cell"]
        assert f"| {script._result(cell)} |" in row[0]  # pylint: disable=protected-access


def test_every_matrix_cell_has_a_result():
    import subprocess
    import sys

    names = subprocess.run(
        [sys.executable, str(REPO / ".ci" / "version_matrix"), "--list"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    results = json.loads((REPO / ".ci" / "version_matrix.json").read_text())
    assert [c["cell"] for c in results["cells"]] == names
    assert {c["status"] for c in results["cells"]} <= {
        "passed",
        "failed",
        "not supported",
        "install failed",
        "not run",
    }
