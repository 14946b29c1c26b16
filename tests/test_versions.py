"""Untested TF/Keras versions get one clear warning at import; setup.py agrees."""

import pathlib
import re
import subprocess
import sys
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


def test_tested_versions_pass_silently(recwarn):
    installed = versions.installed_versions(
        _fake({"tensorflow": "2.21.0", "keras": "3.15.1", "tf-keras": "2.21.0"}))
    assert versions.unsupported_message(installed) is None
    assert versions.warn_if_unsupported(
        _fake({"tensorflow-cpu": "2.21.3", "keras": "3.15.9"})) is None
    assert not [w for w in recwarn if w.category is versions.UnsupportedVersionWarning]


def test_the_running_environment_is_a_tested_one():
    # This suite ran on these versions; if it fails, update SUPPORTED only
    # after the whole suite passed on the new ones.
    assert versions.unsupported_message(versions.installed_versions()) is None


@pytest.mark.parametrize("table,named", [
    ({"tensorflow": "2.22.0", "keras": "3.15.1"}, "tensorflow 2.22.0 (expected 2.21.x)"),
    ({"tensorflow": "2.21.0", "keras": "3.16.0"}, "keras 3.16.0 (expected 3.15.x)"),
    ({"tf-nightly": "2.22.0.dev20260101", "keras-nightly": "3.16.0.dev1"},
     "tf-nightly 2.22.0.dev20260101 (expected 2.21.x), keras-nightly 3.16.0.dev1"),
    ({"tensorflow": "2.21.0", "keras": "3.15.1", "tf-keras": "2.20.1"},
     "tf-keras 2.20.1 (expected 2.21.x)"),
])
def test_an_untested_version_warns_naming_the_checked_versions(table, named):
    with pytest.warns(versions.UnsupportedVersionWarning) as record:
        message = versions.warn_if_unsupported(_fake(table))
    assert len(record) == 1
    assert named in message
    assert message.startswith("tfdist_opt was tested with TensorFlow 2.21 (2.21.0), "
                              "Keras 3.15 (3.15.1), tf-keras 2.21 (2.21.0); found ")


def test_import_warns_once_without_importing_tensorflow(tmp_path):
    # A fake keras 3.16.0 distribution first on the path: what metadata sees.
    info = tmp_path / "keras-3.16.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: keras\nVersion: 3.16.0\n")
    code = ("import sys, tfdist_opt; "
            "print('tf imported' if 'tensorflow' in sys.modules else 'tf not imported')")
    res = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                         text=True, timeout=60,
                         env={"PYTHONPATH": f"{tmp_path}:{REPO}", "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "tf not imported"
    lines = [ln for ln in res.stderr.splitlines() if "UnsupportedVersionWarning" in ln]
    assert len(lines) == 1, res.stderr
    assert "found keras 3.16.0 (expected 3.15.x)" in lines[0]


def test_setup_py_pins_the_same_versions():
    text = (REPO / "setup.py").read_text()
    pins = dict(re.findall(r'^_\w+ = "([\w-]+)==([\d.]+)\.\*"', text, re.M))
    assert {k: pins[k] for k in versions.SUPPORTED} == versions.SUPPORTED
