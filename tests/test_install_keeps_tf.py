"""`pip install tfdist_opt` where TensorFlow 2.19 is installed keeps that TensorFlow.

Teams pin TensorFlow to their CUDA stack; an install that replaced it (as
`tensorflow==2.21.*` did) could not be used there. pip's own resolver decides
(`pip install --dry-run --report`: what it would install, nothing changed),
in a venv that has TensorFlow 2.19:

- the version matrix's TF 2.19 venv when `.ci/version_matrix` has built one
  (`TFDIST_MATRIX_CACHE`, default ~/.cache/tfdist_opt/version_matrix): the
  real TensorFlow 2.19 with its real dependencies;
- otherwise a venv with only the metadata of TensorFlow 2.19.1 and Keras
  3.12.0 (their `dist-info`, with TensorFlow 2.19.1's own requirements on
  Keras, numpy, ml_dtypes and TensorBoard): what pip reads to decide, without
  the 570 MB wheel.

Either way pip reads the registry for the other requirements' metadata (the
network, as `pip install` itself).
"""

import json
import os
import pathlib
import subprocess
import sys
import venv

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
CACHE = pathlib.Path(
    os.environ.get(
        "TFDIST_MATRIX_CACHE", pathlib.Path.home() / ".cache" / "tfdist_opt" / "version_matrix"
    )
)

pytestmark = pytest.mark.slow

# TensorFlow 2.19.1's Requires-Dist for what tfdist_opt also requires.
_TF_219_REQUIRES = (
    "keras>=3.5.0",
    "numpy<2.2.0,>=1.26.0",
    "ml-dtypes<1.0.0,>=0.5.1",
    "tensorboard~=2.19.0",
    "absl-py>=1.0.0",
)


def _matrix_venv():
    for cell in ("tf2.19-keras3.15", "tf2.19-keras3.12"):
        py = CACHE / cell / "bin" / "python"
        if (CACHE / cell / ".tfdist_matrix_stamp").exists() and py.exists():
            return py
    return None


def _stand_in_venv(root: pathlib.Path) -> pathlib.Path:
    """A venv whose site-packages holds TF 2.19.1's and Keras 3.12.0's metadata."""
    venv.EnvBuilder(with_pip=False).create(root)
    py = root / "bin" / "python"
    site = pathlib.Path(
        subprocess.run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout.strip()
    )
    for name, version, requires in (
        ("tensorflow", "2.19.1", _TF_219_REQUIRES),
        ("keras", "3.12.0", ("numpy", "ml-dtypes")),
    ):
        info = site / f"{name}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
            + "".join(f"Requires-Dist: {r}\n" for r in requires)
        )
        (info / "INSTALLER").write_text("pip\n")
        (info / "RECORD").write_text("")
    return py


def test_pip_install_keeps_an_installed_tensorflow_2_19(tmp_path):
    py = _matrix_venv() or _stand_in_venv(tmp_path / "venv")
    report = tmp_path / "report.json"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(py),
            "--disable-pip-version-check",
            "install",
            "--dry-run",
            "--quiet",
            "--report",
            str(report),
            str(REPO),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
    )
    assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
    would_install = {
        i["metadata"]["name"].lower().replace("_", "-"): i["metadata"]["version"]
        for i in json.loads(report.read_text())["install"]
    }
    assert "tfdist-opt" in would_install, would_install
    assert "tensorflow" not in would_install, (
        f"pip would replace TensorFlow 2.19 ({py}) with {would_install['tensorflow']}"
    )
    assert "keras" not in would_install, would_install
