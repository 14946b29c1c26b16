"""A frozen (SIGSTOPped) chief is named as such, not as a collective timeout (issue 16, item 9).

Two real workers on 127.0.0.1, no `collective_timeout_s`. After worker 1
reports step 20, worker 0 (which hosts TF's coordination service) gets
SIGSTOP. TF on worker 1 fails the collective with a DeadlineExceededError
about the coordination service's heartbeat RPC, naming no task; the
summary line must name worker 0 and say what happened.
"""

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.multiworker import harness

pytestmark = [pytest.mark.multiworker, pytest.mark.slow]

SCRIPT = "tests/multiworker/scripts/fault_train.py"


def test_frozen_chief_is_named_by_the_survivor(tmp_path):
    ports = harness.free_ports(2)
    logs = [tmp_path / f"w{i}.log" for i in (0, 1)]
    procs = []
    try:
        for i in (0, 1):
            with open(logs[i], "w") as f:
                procs.append(
                    subprocess.Popen(
                        [sys.executable, SCRIPT, "--steps", "200000", "--mark_step", "20"],
                        env=harness.worker_env(i, ports),
                        stdout=f,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                        cwd=harness.REPO_ROOT,
                    )
                )
        deadline = time.monotonic() + 150
        while "task 1: reached step 20" not in logs[1].read_text():
            assert time.monotonic() < deadline and procs[1].poll() is None, logs[1].read_text()[
                -3000:
            ]
            time.sleep(0.1)
        os.kill(procs[0].pid, signal.SIGSTOP)
        t0 = time.monotonic()
        procs[1].wait(timeout=120)
        detect = time.monotonic() - t0
    finally:
        for p in procs:
            for sig in (signal.SIGKILL, signal.SIGCONT):
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    pass
            p.wait(timeout=30)
    out = logs[1].read_text()
    assert procs[1].returncode not in (0, None), out[-3000:]
    summary = [l for l in out.splitlines() if l.startswith("tfdist_opt: training stopped:")]
    assert summary, out[-3000:]
    assert "the coordination service stopped answering" in summary[0], summary
    assert f"worker:0 (localhost:{ports[0]}), which hosts it, is frozen" in summary[0]
    assert "collective_timeout_s" not in summary[0]
    print(f"item 9: frozen chief -> survivor named it and exited {detect:.2f} s after SIGSTOP")
    assert detect < 90
