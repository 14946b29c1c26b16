r"""Keras's own tests as the yardstick: plain, and under `opt_strategy()`.

    python benchmarks/keras_tests.py --output_json=/tmp/keras_tests.json
    python benchmarks/keras_tests.py --files=keras/src/callbacks/early_stopping_test.py

The source distribution of the installed Keras (`pip download --no-deps
--no-binary :all: keras==<version>`, from the package registry; cached in
`--cache_dir`) carries Keras's tests, which import `keras.src...` and so run
against the installed Keras of the same version. Each chosen file runs in a
pytest process of its own (`--import-mode=importlib`, so `keras` stays the
installed package; `benchmarks/keras_tests_plugin.py` loaded), one file at a
time, in up to two modes:

- `plain`: as Keras runs them.
- `ours`: every test body (with `setUp`/`tearDown`) inside
  `opt_strategy(cpu_replicas=2).scope()`: 2 virtual CPU replicas. The files
  in `OWN_STRATEGY_FILES` build their own `tf.distribute.MirroredStrategy`;
  there each such call is rewritten to `opt_strategy(cpu_replicas=2)` and no
  scope is added.

Per-test outcomes come from pytest's junit XML; the JSON is rewritten after
every file. The JSON holds, per file and
mode, each test's outcome (`passed`, `failed`, `error`, `skipped`) and the
first line of its failure; `summary` counts the tests that pass plain and
how many of them pass under ours. `--plain_json` takes the plain outcomes
recorded earlier (`benchmarks/results/keras_tests_plain_<version>.json`)
instead of running plain again. When the registry cannot be reached the run
skips: the JSON says `skipped` with pip's reason, exit status 0.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET

from absl import app
from absl import flags

HERE = os.path.dirname(os.path.abspath(__file__))
if __package__ in (None, ""):  # run as `python benchmarks/keras_tests.py`
    sys.path.insert(0, os.path.dirname(HERE))

from benchmarks import common  # noqa: E402  pylint: disable=g-import-not-at-top

# The files CI runs: the TF backend's distribution tests with their strategy
# replaced by ours, and the trainer, callbacks, metrics and saving tests
# inside our scope (each under ~2 minutes per mode on a loaded 2-core host,
# but `keras/src/trainers/trainer_test.py`: ~9 to 11 minutes, 147 of its tests
# pass plain).
DEFAULT_FILES = (
    "keras/src/backend/tensorflow/distribute_test.py",
    "keras/src/backend/tensorflow/optimizer_distribute_test.py",
    "keras/src/callbacks/early_stopping_test.py",
    "keras/src/callbacks/reduce_lr_on_plateau_test.py",
    "keras/src/callbacks/learning_rate_scheduler_test.py",
    "keras/src/callbacks/lambda_callback_test.py",
    "keras/src/callbacks/terminate_on_nan_test.py",
    "keras/src/callbacks/backup_and_restore_test.py",
    "keras/src/callbacks/model_checkpoint_test.py",
    "keras/src/metrics/metric_test.py",
    "keras/src/metrics/reduction_metrics_test.py",
    "keras/src/saving/saving_api_test.py",
    "keras/src/trainers/trainer_test.py",
)
OWN_STRATEGY_FILES = (
    "keras/src/backend/tensorflow/distribute_test.py",
    "keras/src/backend/tensorflow/optimizer_distribute_test.py",
)
_MIRRORED_CALL = re.compile(r"tf\.distribute\.MirroredStrategy\(\s*\[[^\]]*\]\s*\)")
_OURS_CALL = '__import__("tfdist_opt").opt_strategy(cpu_replicas=2)'

FLAGS = flags.FLAGS
flags.DEFINE_string(
    "cache_dir",
    os.path.join(os.path.expanduser("~"), ".cache", "tfdist_opt", "keras_sdist"),
    "where the Keras source distribution is downloaded and unpacked",
)
flags.DEFINE_list("files", list(DEFAULT_FILES), "Keras test files, relative to the sdist")
flags.DEFINE_list("modes", ["plain", "ours"], "plain and/or ours")
flags.DEFINE_string("plain_json", "", "recorded plain outcomes to use instead of a plain run")
flags.DEFINE_integer("file_timeout_s", 900, "limit for one file in one mode")


def keras_version() -> str:
    import importlib.metadata

    return importlib.metadata.version("keras")


def fetch_sdist(version: str, cache_dir: str) -> tuple[str | None, str]:
    """Returns (the unpacked source tree or None, why not)."""
    root = os.path.join(cache_dir, f"keras-{version}")
    if os.path.isdir(os.path.join(root, "keras", "src")):
        return root, ""
    os.makedirs(cache_dir, exist_ok=True)
    archive = os.path.join(cache_dir, f"keras-{version}.tar.gz")
    if not os.path.exists(archive):
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            f"keras=={version}",
            "-d",
            cache_dir,
            "-q",
        ]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        except subprocess.TimeoutExpired:
            return None, "pip download of the Keras sdist timed out after 300 s"
        if proc.returncode != 0 or not os.path.exists(archive):
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            return None, "pip download failed: " + " | ".join(tail)
    with tarfile.open(archive) as tar:
        tar.extractall(cache_dir, filter="data")
    return root, ""


def _prepared_file(root: str, rel: str, mode: str, work: str) -> str:
    """The file to run: the sdist's own, or a copy with our strategy swapped in."""
    src = os.path.join(root, rel)
    if mode != "ours" or rel not in OWN_STRATEGY_FILES:
        return src
    with open(src, encoding="utf-8") as f:
        text = f.read()
    text, count = _MIRRORED_CALL.subn(_OURS_CALL, text)
    if not count:
        raise RuntimeError(f"{rel}: no tf.distribute.MirroredStrategy([...]) call to replace")
    # Beside the original, so its relative imports and data files still resolve.
    dst = os.path.join(os.path.dirname(src), "tfdist_ours_" + os.path.basename(src))
    with open(dst, "w", encoding="utf-8") as f:
        f.write(text)
    return dst


def _outcomes(junit_path: str) -> dict:
    tests = {}
    root = ET.parse(junit_path).getroot()
    for case in root.iter("testcase"):
        name = case.get("classname", "").rsplit(".", 1)[-1] + "::" + case.get("name", "")
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = {"failure": "failed"}.get(tag, tag)
                message = (node.get("message") or "").strip().splitlines()[:1]
                message = message[0][:300] if message else ""
                break
        tests[name] = {"outcome": outcome, "message": message}
    return tests


def run_file(root: str, rel: str, mode: str, timeout_s: int) -> dict:
    """Runs one Keras test file in one mode; returns its outcomes and time."""
    with tempfile.TemporaryDirectory() as work:
        path = _prepared_file(root, rel, mode, work)
        junit = os.path.join(work, "junit.xml")
        ini = os.path.join(work, "pytest.ini")
        with open(ini, "w", encoding="utf-8") as f:
            f.write("[pytest]\nfilterwarnings =\n    ignore::DeprecationWarning\n")
        env = dict(os.environ)
        env["TFDIST_KERAS_TESTS_MODE"] = (
            "ours_own" if mode == "ours" and rel in OWN_STRATEGY_FILES else mode
        )
        env["KERAS_BACKEND"] = "tensorflow"
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        env["CUDA_VISIBLE_DEVICES"] = "-1"
        env["PYTHONPATH"] = os.pathsep.join(
            [HERE, os.path.dirname(HERE), env.get("PYTHONPATH", "")]
        ).rstrip(os.pathsep)
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "-c",
            ini,
            "--rootdir",
            root,
            "--import-mode=importlib",
            "-p",
            "keras_tests_plugin",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            "-q",
            "--junitxml",
            junit,
            path,
        ]
        if _has_xdist():
            cmd[3:3] = ["-n", "0"]
        start = time.monotonic()
        crashed = None
        for _ in range(2):
            rc, tail = _run_pytest(cmd, root, env, timeout_s)
            tests = _outcomes(junit) if os.path.exists(junit) else {}
            # A process killed by a signal (a TF segfault at exit was seen
            # once in ~20 runs of a file that passes) runs once more; the
            # crash stays in the report.
            if not (isinstance(rc, int) and rc < 0) or crashed is not None:
                break
            crashed = {"returncode": rc, "output_tail": tail}
            if os.path.exists(junit):
                os.remove(junit)
        seconds = round(time.monotonic() - start, 1)
        if path != os.path.join(root, rel):
            os.remove(path)
        result = {"seconds": seconds, "returncode": rc, "tests": tests}
        if crashed is not None:
            result["crashed_first"] = crashed
        if not tests:
            result["output_tail"] = tail
        return result


def _run_pytest(cmd, root, env, timeout_s) -> tuple:
    """(return code or "timeout", the output's tail: from a fatal error on, if any)."""
    try:
        proc = subprocess.run(
            cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout_s
        )
        rc, out = proc.returncode, proc.stdout + proc.stderr
    except subprocess.TimeoutExpired as e:
        rc, out = "timeout", str(e.stdout or "")
    fatal = out.find("Fatal Python error")
    return rc, (out[fatal : fatal + 4000] if fatal >= 0 else out[-2000:])


def _has_xdist() -> bool:
    import importlib.util

    return importlib.util.find_spec("xdist") is not None


def summarize(files: dict) -> dict:
    """Counts, over files run in both modes, the plain passes that pass under ours."""
    plain_pass = ours_pass = 0
    regressions = []
    for rel, modes in files.items():
        if "plain" not in modes or "ours" not in modes:
            continue
        ours = modes["ours"]["tests"]
        for name, got in modes["plain"]["tests"].items():
            if got["outcome"] != "passed":
                continue
            plain_pass += 1
            under = ours.get(name, {"outcome": "missing", "message": ""})
            if under["outcome"] == "passed":
                ours_pass += 1
            else:
                regressions.append({"file": rel, "test": name, **under})
    return {
        "plain_passed": plain_pass,
        "ours_passed_of_those": ours_pass,
        "plain_pass_ours_not": regressions,
    }


def main(argv):
    del argv
    version = keras_version()
    # `provenance`: the commit, resolved StrategyConfig and machine, as
    # every benchmark's report records them (`common.write_report`).
    report = {"keras_version": version, "files": {}, "provenance": common.provenance()}
    root, why = fetch_sdist(version, FLAGS.cache_dir)
    if root is None:
        report["skipped"] = why
        print(f"skipped: {why}")
    else:
        recorded = {}
        if FLAGS.plain_json:
            with open(FLAGS.plain_json, encoding="utf-8") as f:
                recorded = json.load(f)["files"]
        for rel in FLAGS.files:
            entry = report["files"].setdefault(rel, {})
            for mode in FLAGS.modes:
                if mode == "plain" and rel in recorded:
                    entry["plain"] = recorded[rel]["plain"]
                    continue
                entry[mode] = run_file(root, rel, mode, FLAGS.file_timeout_s)
                counts = {}
                for t in entry[mode]["tests"].values():
                    counts[t["outcome"]] = counts.get(t["outcome"], 0) + 1
                print(f"{rel} [{mode}] {entry[mode]['seconds']} s {counts}", flush=True)
            if rel in recorded and "plain" not in FLAGS.modes:
                entry["plain"] = recorded[rel]["plain"]
            _write(report)  # after every file: a cut run keeps what ran
        report["summary"] = summarize(report["files"])
        s = report["summary"]
        print(
            f"Keras {version}'s tests under opt_strategy: {s['ours_passed_of_those']} of "
            f"{s['plain_passed']} that pass plain"
        )
        for r in s["plain_pass_ours_not"]:
            print(f"  {r['file']}::{r['test']} [{r['outcome']}] {r['message'][:160]}")
    _write(report)
    return 0


def _write(report: dict) -> None:
    if FLAGS.output_json:
        with open(FLAGS.output_json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1, sort_keys=True)


if __name__ == "__main__":
    app.run(main)
