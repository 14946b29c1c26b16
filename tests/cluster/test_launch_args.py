"""Every bad `tfdist-opt launch` argument is one `launch: error:` line, rc 2 (issue 16, item 7).

Checked before anything starts: no worker, no watchdog, no traceback.
"""

import os
import sys

import pytest

from tfdist_opt import cli
from tfdist_opt.cluster import launcher

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PY = sys.executable


@pytest.mark.parametrize("argv, match", [
    (["-n", "2", "--", "/nonexistent/cmd"], "'/nonexistent/cmd' does not exist"),
    (["-n", "1", "--", "/nonexistent/cmd"], "'/nonexistent/cmd' does not exist"),
    (["-n", "2", "--", "./README.md"], "'./README.md' is not executable; run it "
                                       "through its interpreter"),
    (["-n", "2", "--", "./tests"], "'./tests' is a directory"),
    (["-n", "2", "--", "no-such-program-xyz"], "'no-such-program-xyz' was not found on PATH"),
    (["-n", "2", "--base-port", "65535", "--", PY], "Received: --base-port=65535"),
    (["-n", "2", "--base-port", "0", "--", PY], "Received: --base-port=0"),
    (["-n", "2", "--startup-timeout", "-1", "--", PY], "Received: --startup-timeout=-1.0"),
    (["-n", "2", "--startup-timeout", "nan", "--", PY], "Received: --startup-timeout=nan"),
    (["-n", "2", "--term-timeout", "-5", "--", PY], "Received: --term-timeout=-5.0"),
    (["-n", "2", "--startup-timeout", "soon", "--", PY], "invalid float value: 'soon'"),
])
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
    launcher.check_launch_numbers(2, 65534, 10, 1)       # ports 65534, 65535: fine
    with pytest.raises(ValueError, match=r"expected an int in \[1, 65534\]"):
        launcher.check_launch_numbers(2, 65535, 10, 1)


def test_exec_failure_after_the_checks_is_a_launch_error(tmp_path):
    prog = tmp_path / "noexec"
    prog.write_bytes(b"\x00\x01binary without interpreter")
    prog.chmod(0o755)
    with pytest.raises(launcher.LaunchError, match="Cannot start worker 0: .*Exec format error"):
        launcher.run_local([str(prog)], 1, handle_signals=False)
