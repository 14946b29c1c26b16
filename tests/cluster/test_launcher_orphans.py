"""No process outlives `tfdist-opt launch`, however it ends (issue 16, item 4).

Real processes, no TensorFlow. Each worker is `sh -c "python w.py; echo"`
(a shell between the launcher and Python) and `w.py` starts two
grandchildren: one in the worker's process group and one that leaves it
with `setsid`. PR_SET_PDEATHSIG reaches only the shell; the launcher's
watchdog must kill the rest when the launcher is SIGKILLed, and the
launcher itself on a normal exit and when a worker fails.
"""

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.multiworker import harness

pytestmark = pytest.mark.multiworker

WORKER = r"""
import os, subprocess, sys, time
out, mode = sys.argv[1], sys.argv[2]
i = os.environ["TFDIST_LAUNCH_WORKER_INDEX"]
sleep = [sys.executable, "-c", "import time; time.sleep(300)"]
kids = [subprocess.Popen(sleep), subprocess.Popen(sleep, start_new_session=True)]
tmp = os.path.join(out, f".pids-{i}")
with open(tmp, "w") as f:
    f.write(" ".join(str(p) for p in [os.getpid()] + [k.pid for k in kids]))
os.replace(tmp, os.path.join(out, f"pids-{i}"))
if mode == "fail1" and i == "1":
    # Fail only once worker 0 has written its pids: otherwise the launcher may
    # stop worker 0 before it does (seen under load) and the test sees nothing.
    deadline = time.monotonic() + 60
    while not os.path.exists(os.path.join(out, "pids-0")) and time.monotonic() < deadline:
        time.sleep(0.01)
if mode == "exit0" or (mode == "fail1" and i == "1"):
    sys.exit(1 if mode == "fail1" else 0)   # leave the grandchildren behind
time.sleep(300)
"""


def _start(tmp_path, mode):
    script = tmp_path / "w.py"
    script.write_text(WORKER)
    env = dict(os.environ, PYTHONPATH=harness.REPO_ROOT)
    env.pop("TF_CONFIG", None)
    # `;` as in the issue; `&&` when the shell must pass on the failure.
    sep = "&&" if mode == "fail1" else ";"
    cmd = f"{sys.executable} {script} {tmp_path} {mode} {sep} echo worker-shell-done"
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tfdist_opt",
            "launch",
            "-n",
            "2",
            "--startup-timeout",
            "0",
            "--term-timeout",
            "1",
            "--",
            "sh",
            "-c",
            cmd,
        ],
        env=env,
        cwd=harness.REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _all_pids(tmp_path, proc, timeout=60):
    pids = []
    for i in (0, 1):
        harness.wait_for_file(tmp_path / f"pids-{i}", proc, timeout=timeout)
        pids += [int(p) for p in (tmp_path / f"pids-{i}").read_text().split()]
    assert len(pids) == 6
    return pids


def _wait_gone(pids, timeout=20):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        left = [p for p in pids if harness.process_running(p)]
        if not left:
            return time.monotonic() - t0, []
        time.sleep(0.02)
    return time.monotonic() - t0, left


def _cleanup(pids, proc):
    for pid in pids:
        if harness.process_running(pid):
            os.kill(pid, signal.SIGKILL)
    harness.finish_launch(proc, timeout=10)


def test_sigkill_of_launcher_kills_shell_wrapped_workers_and_grandchildren(tmp_path):
    proc = _start(tmp_path, "sleep")
    pids = []
    try:
        pids = _all_pids(tmp_path, proc)
        os.kill(proc.pid, signal.SIGKILL)  # the launcher only, not its group
        elapsed, left = _wait_gone(pids)
        assert left == [], f"still running after the launcher's SIGKILL: {left}"
        print(f"item 4: launcher SIGKILLed -> all 6 processes gone in {elapsed:.2f} s")
        assert elapsed < 10
    finally:
        _cleanup(pids, proc)


@pytest.mark.parametrize("mode, code", [("exit0", 0), ("fail1", 1)])
def test_every_exit_path_leaves_no_grandchild(tmp_path, mode, code):
    proc = _start(tmp_path, mode)
    pids = []
    try:
        pids = _all_pids(tmp_path, proc)
        _, err = harness.finish_launch(proc, timeout=60)
        assert proc.returncode == code, err[-2000:]
        elapsed, left = _wait_gone(pids, timeout=5)
        assert left == [], f"left after the launch returned {code}: {left}"
    finally:
        _cleanup(pids, proc)


def test_sigterm_of_launcher_kills_everything(tmp_path):
    proc = _start(tmp_path, "sleep")
    pids = []
    try:
        pids = _all_pids(tmp_path, proc)
        os.kill(proc.pid, signal.SIGTERM)
        _, err = harness.finish_launch(proc, timeout=30)
        assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
        _, left = _wait_gone(pids, timeout=5)
        assert left == []
    finally:
        _cleanup(pids, proc)
