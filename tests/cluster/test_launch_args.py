"""Every bad `tfdist-opt launch` argument is one `launch: error:` line, rc 2 (issue 16, item 7).

Checked before anything starts: no worker, no watchdog, no traceback.
"""

import os
import sys

import pytest

from tfdist_opt import cli
from tfdist_opt.launch import local as launcher

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PY = sys.executable


@pytest.mark.parametrize(
    "argv, match",
    [
        (["-n", "2", "--", "/nonexistent/cmd"], "'/nonexistent/cmd' does not exist"),
        (["-n", "1", "--", "/nonexistent/cmd"], "'/nonexistent/cmd' does not exist"),
        (
            ["-n", "2", "--", "./README.md"],
            "'./README.md' is not executable; run it through its interpreter",
        ),
        (["-n", "2", "--", "./tests"], "'./tests' is a directory"),
        (["-n", "2", "--", "no-such-program-xyz"], "'no-such-program-xyz' was not found on PATH"),
        (["-n", "2", "--base-port", "65535", "--", PY], "Received: --base-port=65535"),
        (["-n", "2", "--base-port", "0", "--", PY], "Received: --base-port=0"),
        (["-n", "2", "--startup-timeout", "-1", "--", PY], "Received: --startup-timeout=-1.0"),
        (["-n", "2", "--startup-timeout", "nan", "--", PY], "Received: --startup-timeout=nan"),
        (["-n", "2", "--term-timeout", "-5", "--", PY], "Received: --term-timeout=-5.0"),
        (["-n", "2", "--startup-timeout", "soon", "--", PY], "invalid float value: 'soon'"),
        (["-n", "1", "--evaluator", "--", PY], "Received: -n 1 --evaluator. Expected -n 2"),
        (["-n", "2", "--evaluator", "h:1", "--", PY], "Received: --evaluator h:1"),
        (["--workers", "h1:1,h2:1", "--evaluator", "--", PY], "Missing address for `--evaluator`"),
    ],
)
def test_bad_argument_is_one_error_line_rc_2(capsys, monkeypatch, argv, match):
    monkeypatch.chdir(REPO_ROOT)
    code = cli.main(["launch", *argv])
    out, err = capsys.readouterr()
    assert code == 2, err
    lines = [l for l in err.splitlines() if l.strip()]
    assert lines[-1].startswith("tfdist-opt launch: error: "), err
    assert match in lines[-1], err
    assert "Traceback" not in err and out == ""
    assert not any(l.startswith("[launch] starting") for l in lines)


def test_base_port_range_depends_on_worker_count():
    launcher.check_launch_numbers(2, 65534, 10, 1)  # ports 65534, 65535: fine
    with pytest.raises(ValueError, match=r"expected an int in \[1, 65534\]"):
        launcher.check_launch_numbers(2, 65535, 10, 1)


def test_exec_failure_after_the_checks_is_a_launch_error(tmp_path):
    prog = tmp_path / "noexec"
    prog.write_bytes(b"\x00\x01binary without interpreter")
    prog.chmod(0o755)
    with pytest.raises(launcher.LaunchError, match="Cannot start worker 0: .*Exec format error"):
        launcher.run_local([str(prog)], 1, handle_signals=False)


def test_evaluator_envs_name_it_outside_the_training_tasks():
    import json

    envs = [
        launcher.worker_env({}, i, ["localhost:1", "localhost:2"], evaluator="localhost:3")
        for i in range(2)
    ]
    ev = launcher.evaluator_env({}, "localhost:3", {"worker": ["localhost:1", "localhost:2"]})
    cfgs = [json.loads(e["TF_CONFIG"]) for e in (*envs, ev)]
    assert all(
        c["cluster"] == {"worker": ["localhost:1", "localhost:2"], "evaluator": ["localhost:3"]}
        for c in cfgs
    )
    assert cfgs[2]["task"] == {"type": "evaluator", "index": 0}
    assert launcher.WORKER_INDEX_ENV not in ev
    ps_envs, labels = launcher.ps_task_envs({}, 1, 1, ["h:1", "h:2", "h:3"], evaluator="h:4")
    assert labels == ["chief 0", "worker 0", "ps 0", "evaluator 0"]
    assert json.loads(ps_envs[-1]["TF_CONFIG"])["cluster"]["evaluator"] == ["h:4"]


def test_host_list_prints_the_evaluator_command(capsys):
    assert (
        cli.main(
            ["launch", "--workers", "h1:1,h2:1", "--evaluator", "h3:1", "--", "python", "t.py"]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "# evaluator 0 on h3:1" in out
    assert '"task":{"type":"evaluator","index":0}' in out
