"""A built wheel works on its own: presets, benchmark binaries, `info`.

Builds the wheel from a copy of this checkout (`pip wheel . --no-deps`,
without build isolation when this environment has setuptools and wheel, so
no network), installs it with `--no-deps --target`
into a fresh folder and runs it from another folder with only that folder
on PYTHONPATH (TensorFlow and the other dependencies come from this
interpreter's environment, so nothing is downloaded). `tfdist_opt.__file__`
is checked to be the installed copy, so the checkout cannot stand in.
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import zipfile

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
_IGNORE = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", "results", "out"
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(site dir, wheel path) of a wheel built from a copy of the checkout."""
    root = tmp_path_factory.mktemp("install")
    src = root / "src"
    shutil.copytree(REPO, src, ignore=_IGNORE)
    dist, site = root / "dist", root / "site"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(
        pip + ["wheel", str(src), "--no-deps", *_isolation(), "-w", str(dist)],
        check=True,
        timeout=300,
        cwd=root,
    )
    (wheel,) = dist.glob("tfdist_opt-*.whl")
    subprocess.run(
        pip + ["install", "--no-deps", "--target", str(site), str(wheel)],
        check=True,
        timeout=300,
        cwd=root,
    )
    return site, wheel


def _isolation():
    """Build with this environment's setuptools when it has one (offline);
    otherwise let pip fetch the build backend from the registry."""
    try:
        import setuptools  # noqa: F401
        import wheel  # noqa: F401
    except ImportError:
        return []
    return ["--no-build-isolation"]


def _run(site, args, elsewhere, timeout=240):
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("TFDIST_OPT_") and k not in ("PYTHONPATH", "TF_CONFIG")
    }
    env["PYTHONPATH"] = str(site)
    return subprocess.run(
        args, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_the_wheel_carries_configs_and_benchmarks_byte_for_byte(installed):
    _, wheel = installed
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        shipped = {n for n in names if n.startswith("tfdist_opt/_data/")}
        expected = (
            [
                ("configs", p)
                for p in sorted((REPO / "configs").iterdir())
                if p.suffix in (".json", ".toml")
            ]
            + [("benchmarks", p) for p in sorted((REPO / "benchmarks").glob("*.py"))]
            + [("benchmarks", p) for p in sorted((REPO / "benchmarks" / "train_lib").glob("*.py"))]
        )
        assert len(expected) >= 8
        for folder, path in expected:
            name = f"tfdist_opt/_data/{folder}/{path.relative_to(REPO / folder)}"
            assert name in shipped, name
            assert z.read(name) == path.read_bytes(), name
        assert "tfdist_opt/_data/benchmarks/__init__.py" in shipped
        # Nothing else sneaks in (results/, plots, logs).
        assert len(shipped) == len(expected) + 1, sorted(shipped)


def test_presets_load_by_name_from_the_installed_wheel(installed, tmp_path):
    site, _ = installed
    script = (
        "import json, tfdist_opt\n"
        "from tfdist_opt import config_files\n"
        "names = [p.stem for p in config_files.list_presets()]\n"
        "loaded = {n: tfdist_opt.StrategyConfig.load(n).to_dict() for n in names}\n"
        "print(json.dumps({'file': tfdist_opt.__file__, 'dir': str(config_files.presets_dir()),"
        " 'loaded': loaded}))\n"
    )
    res = _run(site, [sys.executable, "-c", script], tmp_path)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["file"].startswith(str(site)), out["file"]
    assert out["dir"] == str(site / "tfdist_opt" / "_data" / "configs")
    repo_presets = sorted(
        p.stem for p in (REPO / "configs").iterdir() if p.suffix in (".json", ".toml")
    )
    assert sorted(out["loaded"]) == repo_presets
    assert out["loaded"]["cpu_test"]["cpu_replicas"] == 2


@pytest.mark.parametrize(
    "name,binary,flag",
    [
        ("train", "train.py", "--model"),
        ("allreduce", "allreduce.py", "--mode"),
        ("input", "input_pipeline.py", "--batch_size"),
    ],
)
def test_bench_help_runs_the_installed_binaries(installed, tmp_path, name, binary, flag):
    site, _ = installed
    res = _run(site, [str(site / "bin" / "tfdist-opt"), "bench", name, "--help"], tmp_path)
    out = res.stdout + res.stderr
    assert "Traceback" not in out, out
    # absl's --help exits 1 after printing the main module's flags.
    assert res.returncode in (0, 1), out
    assert f"{site}/tfdist_opt/_data/benchmarks/{binary}:" in out, out
    assert f"  {flag}" in out, out


def test_info_runs_from_the_installed_wheel(installed, tmp_path):
    site, _ = installed
    res = _run(site, [str(site / "bin" / "tfdist-opt"), "info"], tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "strategy" in res.stdout
    assert "cpu_test.json" in res.stdout, res.stdout
