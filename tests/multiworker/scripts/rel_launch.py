"""Test-side functions for test_restart_resume.py and test_preemption.py.

`start()` runs `tfdist-opt launch -n 2 ... -- python rel_train.py` in its own
process group (127.0.0.1, free ports, a timeout on every wait); `finish()`
always kills the group. `reference()` runs the uninterrupted job once per
test session and caches it, so both modules compare against the same run.
"""

from __future__ import annotations

import json
import os
import signal
import time

from tests.multiworker import harness

REPO_ROOT = os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
)
SCRIPT = os.path.join(REPO_ROOT, "tests", "multiworker", "scripts", "rel_train.py")
TOTAL_STEPS = 36  # 96 examples / global batch 8 x 3 epochs
TIMEOUT_S = 180

_REFERENCE: dict = {}


def start(root, *launch_options, script_args=(), out="out", extra_env=None):
    """Starts the launcher; the job's dirs are root/out, root/backup, root/tmp."""
    root = str(root)
    for d in ("backup", "tmp"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    return harness.start_launch(
        2,
        launch_options,
        [
            SCRIPT,
            "--out",
            os.path.join(root, out),
            "--backup",
            os.path.join(root, "backup"),
            *script_args,
        ],
        extra_env={"TMPDIR": os.path.join(root, "tmp"), **(extra_env or {})},
    )


def finish(proc, timeout=TIMEOUT_S):
    """(stdout, stderr) of the launch; its process group is killed whatever happens."""
    return harness.finish_launch(proc, timeout)


def kill_pids(pids):
    """SIGKILLs worker pids that outlived their launcher (there should be none)."""
    left = []
    for pid in pids:
        if running(pid):
            left.append(pid)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return left


running = harness.process_running
wait_for = harness.wait_for_file


def result(out_dir, attempt, index):
    with open(os.path.join(str(out_dir), f"attempt-{attempt}-worker-{index}.json")) as f:
        return json.load(f)


def read(out_dir, name):
    with open(os.path.join(str(out_dir), name)) as f:
        return f.read()


def pids(out_dir):
    return [int(read(out_dir, f"pid-{i}")) for i in (0, 1)]


def backup_temp_dirs(root):
    return [
        p for p in os.listdir(os.path.join(str(root), "tmp")) if p.startswith("tfdist_opt_backup")
    ]


def reference(tmp_path_factory):
    """The uninterrupted run (also checks case 10's input errors), once per session."""
    if not _REFERENCE:
        root = tmp_path_factory.mktemp("reference")
        t0 = time.monotonic()
        proc = start(root, script_args=("--check-input-errors",))
        out, err = finish(proc)
        assert proc.returncode == 0, f"{out[-2000:]}\n{err[-4000:]}"
        _REFERENCE.update(
            root=root,
            seconds=time.monotonic() - t0,
            workers=[result(root / "out", 0, i) for i in (0, 1)],
        )
    return _REFERENCE
