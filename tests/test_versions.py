"""Versions outside the tested set get one clear warning at import; pyproject agrees."""

import pathlib
import re
import subprocess
import sys
import tomllib
from importlib import metadata

import pytest

from tfdist_opt import versions

REPO = pathlib.Path(__file__).resolve().parent.parent


def _fake(table):
    def version(name):
        if name not in table:
            raise metadata.PackageNotFoundError(name)
        return table[name]

    return version


@pytest.mark.parametrize(
    "table",
    [
        {"tensorflow": "2.21.0", "keras": "3.15.1", "tf-keras": "2.21.0"},
        {"tensorflow-cpu": "2.21.3", "keras": "3.12.0"},
        {"tensorflow": "2.18.1", "keras": "3.12.0", "tf-keras": "2.18.0"},
        {"tensorflow": "2.19.1", "keras": "3.13.2"},
        {"tensorflow": "2.20.0", "keras": "3.15.1", "tf-keras": "2.20.1"},
    ],
)
def test_tested_versions_pass_silently(recwarn, table):
    assert versions.warn_if_unsupported(_fake(table)) is None
    assert not [w for w in recwarn if w.category is versions.UnsupportedVersionWarning]


@pytest.mark.compat
def test_the_running_environment_is_a_tested_one():
    # The version matrix runs this in each of its venvs; if it fails, widen
    # TENSORFLOW/KERAS only after the matrix passed on the new versions.
    assert versions.unsupported_message(versions.installed_versions()) is None


@pytest.mark.parametrize(
    "table,named",
    [
        (
            {"tensorflow": "2.22.0", "keras": "3.15.1"},
            "tensorflow 2.22.0 (expected 2.18.x to 2.21.x)",
        ),
        (
            {"tensorflow": "2.17.1", "keras": "3.10.0"},
            "tensorflow 2.17.1 (expected 2.18.x to 2.21.x)",
        ),
        (
            {"tensorflow": "2.21.0", "keras": "3.16.0"},
            "keras 3.16.0 (expected 3.12.x to 3.15.x with TensorFlow 2.21)",
        ),
        (
            {"tensorflow": "2.21.0", "keras": "3.11.0"},
            "keras 3.11.0 (expected 3.12.x to 3.15.x with TensorFlow 2.21)",
        ),
        (
            {"tensorflow": "2.19.0", "keras": "3.10.0"},
            "keras 3.10.0 (expected 3.12.x to 3.15.x with TensorFlow 2.19)",
        ),
        (
            {"tf-nightly": "2.22.0.dev20260101", "keras-nightly": "3.16.0.dev1"},
            "tf-nightly 2.22.0.dev20260101 (expected 2.18.x to 2.21.x), "
            "keras-nightly 3.16.0.dev1 (expected 3.12.x to 3.15.x)",
        ),
        (
            {"tensorflow": "2.21.0", "keras": "3.15.1", "tf-keras": "2.20.1"},
            "tf-keras 2.20.1 (expected 2.21.x, TensorFlow's minor)",
        ),
    ],
)
def test_an_untested_version_warns_naming_the_checked_versions(table, named):
    with pytest.warns(versions.UnsupportedVersionWarning) as record:
        message = versions.warn_if_unsupported(_fake(table))
    assert len(record) == 1
    assert named in message
    assert message.startswith(
        "tfdist_opt was tested with TensorFlow 2.18-2.21 (Keras 3.12-3.15 with "
        "TensorFlow 2.18, 2.19, 2.20, 2.21; tf-keras of TensorFlow's minor); found "
    )
    assert 'pip install "tensorflow>=2.18,<2.22" "keras>=3.12,<3.16"' in message


def test_import_warns_once_without_importing_tensorflow(tmp_path):
    # A fake keras 3.16.0 distribution first on the path: what metadata sees.
    info = tmp_path / "keras-3.16.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: keras\nVersion: 3.16.0\n")
    code = (
        "import sys, tfdist_opt, importlib; importlib.reload(tfdist_opt); "
        "print('tf imported' if 'tensorflow' in sys.modules else 'tf not imported')"
    )
    res = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": f"{tmp_path}:{REPO}", "PATH": "/usr/bin:/bin"},
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "tf not imported"
    lines = [ln for ln in res.stderr.splitlines() if "UnsupportedVersionWarning" in ln]
    assert len(lines) == 1, res.stderr
    assert "found keras 3.16.0 (expected 3.1" in lines[0]


def _requirement(reqs, name):
    """`name`'s specifier set(s) in a list of requirement strings."""
    return [
        re.split(r"[;]", r)[0][len(name) :].strip()
        for r in reqs
        if re.match(re.escape(name) + r"\s*[<>=!~]", r)
    ]


def test_pyproject_requires_the_tested_ranges():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    deps, extras = project["dependencies"], project["optional-dependencies"]
    tf, keras = versions.TENSORFLOW, versions.KERAS
    upper_tf = "<2.%d" % (int(tf[-1].split(".")[1]) + 1)
    assert f">={tf[0]},{upper_tf}" in _requirement(deps, "tensorflow")
    lows = sorted({k[0] for k in keras.values()}, key=lambda v: tuple(map(int, v.split("."))))
    highs = {k[1] for k in keras.values()}
    assert len(highs) == 1
    (high,) = highs
    upper_keras = "<3.%d" % (int(high.split(".")[1]) + 1)
    assert _requirement(deps, "keras") == [f">={lows[0]},{upper_keras}"]
    for extra in ("legacy", "test"):
        assert _requirement(extras[extra], "tf-keras") == [f">={tf[0]},{upper_tf}"], extra
    # Python: our floor and, per TensorFlow, the newest with TF wheels.
    newest = max(
        (p[1] for p in versions.PYTHON.values()), key=lambda v: tuple(map(int, v.split(".")))
    )
    assert project["requires-python"] == ">=3.11,<3.%d" % (int(newest.split(".")[1]) + 1)
    for minor in tf:
        assert versions.PYTHON[minor][0] == "3.11"


@pytest.mark.parametrize(
    "installed,line",
    [
        (
            {"tensorflow": ("tensorflow", "2.19.1"), "keras": ("keras", "3.12.0")},
            "tested set   : yes (tensorflow 2.19.1, keras 3.12.0); tested: TensorFlow 2.18-2.21 (",
        ),
        (
            {"tensorflow": ("tensorflow", "2.21.0"), "keras": ("keras", "3.11.0")},
            "tested set   : no: keras 3.11.0 (expected 3.12.x to 3.15.x with TensorFlow 2.21); "
            "tested: TensorFlow 2.18-2.21 (",
        ),
    ],
)
def test_info_says_whether_the_versions_are_in_the_tested_set(monkeypatch, installed, line):
    from tfdist_opt.cli import info

    monkeypatch.setattr(versions, "installed_versions", lambda: installed)
    tested = info._tested_set()  # pylint: disable=protected-access
    text = info.format_text(
        {
            "python": "3.11.7",
            "tensorflow": "2.21.0",
            "keras": "keras 3.15.1",
            "built_with_cuda": False,
            "devices": {"CPU": 1, "GPU": []},
            "tested_set": tested,
            "error": "stop after the versions",
        }
    )
    assert text.splitlines()[2].startswith(line), text


def test_keras_tested_is_the_matrix_range():
    # seam.upstream logs "checked against Keras ..." only outside it.
    assert versions.KERAS_RANGE == "3.12-3.15"
    assert versions.keras_tested("3.12.4") and versions.keras_tested("3.15.1")
    assert not versions.keras_tested("3.10.0")
    assert not versions.keras_tested("3.16.0")
