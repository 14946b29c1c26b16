"""`tfdist-opt launch --workers N --ps K`: one script on chief, workers and ps tasks."""

import json
import os
import subprocess
import sys

import pytest

from tests.multiworker import harness

pytestmark = [pytest.mark.multiworker, pytest.mark.slow]

HERE = os.path.dirname(os.path.abspath(__file__))


def _launch(script, workers, ps, extra_env):
    env = harness.worker_env(0, [1], dict(extra_env, TF_CONFIG=""))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tfdist_opt",
            "launch",
            "--workers",
            str(workers),
            "--ps",
            str(ps),
            "--",
            *harness.python(),
            os.path.join(HERE, script),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        cwd=harness.REPO_ROOT,
    )
    try:
        out, err = proc.communicate(timeout=170)
    finally:
        harness._kill(proc)  # pylint: disable=protected-access
    return proc.returncode, out, err


def _result(out):
    lines = [l for l in out.splitlines() if "RESULT " in l]
    assert lines, out[-3000:]
    return json.loads(lines[-1].split("RESULT ", 1)[1])


def test_launch_keras3_script_on_chief_workers_and_ps():
    code, out, err = _launch("_cluster_script.py", 2, 1, {"PS_EPOCHS": "2", "PS_STEPS": "10"})
    assert code == 0, err[-3000:]
    assert "[launch] starting 4 task(s) (chief, workers, ps)" in err
    result = _result(out)
    assert out.count("RESULT ") == 1 and "[chief 0] RESULT " in out
    assert result["strategy"] == "KerasParameterServerStrategy"
    assert result["iterations"] == 20
    for task in ("worker 0", "worker 1", "ps 0"):
        assert f"[{task}] tfdist_opt: {task.replace(' ', ':')}: the chief finished" in err


def test_tf_keras_native_fit_under_opt_strategy():
    code, out, err = _launch("_tf_keras_script.py", 1, 1, {"TF_USE_LEGACY_KERAS": "1"})
    assert code == 0, err[-3000:]
    result = _result(out)
    assert result["strategy"] == "KerasParameterServerStrategy"
    assert result["iterations"] == 30
    assert result["loss"][-1] < result["loss"][0]
    assert result["kernel_device"].startswith("/job:ps/")
