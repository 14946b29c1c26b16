"""`tfdist-opt launch` with real TensorFlow workers on 127.0.0.1.

- `launch -n 2 -- python launch_train.py` trains on two workers: both report
  2 replicas and end with identical weights; `-n 1 --cpu-replicas 2` runs one
  process over two virtual CPUs.
- SIGKILL one worker mid-training: launch exits non-zero within 60 s and no
  worker is left; with `--max-restarts 1` the group restarts once and the
  second attempt trains to the end.
"""

import json
import os
import signal
import time

import pytest

from tests.multiworker import harness

pytestmark = [pytest.mark.multiworker, pytest.mark.slow]

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO_ROOT, "tests", "multiworker", "scripts", "launch_train.py")
TIMEOUT_S = 240


def _launch(out_dir, *options, script_args=(), n=2):
    return harness.start_launch(n, options, [SCRIPT, "--out", str(out_dir), *script_args])


def _finish(proc, timeout=TIMEOUT_S):
    return harness.finish_launch(proc, timeout)


def _pids(out_dir):
    return [int((out_dir / f"worker-{i}.pid").read_text()) for i in range(2)]


def _kill_left(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _results(out_dir):
    return [json.loads((out_dir / f"worker-{i}.json").read_text()) for i in range(2)]


def test_launch_trains_on_two_workers(tmp_path):
    proc = _launch(tmp_path)
    out, err = _finish(proc)
    assert proc.returncode == 0, f"{out[-2000:]}\n{err[-4000:]}"
    assert "[worker 0] replicas=2 attempt=0" in out
    assert "[worker 1] replicas=2 attempt=0" in out
    w0, w1 = _results(tmp_path)
    assert w0["replicas"] == w1["replicas"] == 2
    assert w0["weights"] == w1["weights"]  # bit-identical after all-reduce
    assert w0["loss"][-1] < w0["loss"][0]
    assert not any(harness.process_running(p) for p in _pids(tmp_path))


def test_launch_one_process_over_cpu_replicas(tmp_path):
    proc = _launch(tmp_path, "--cpu-replicas", "2", n=1)
    out, err = _finish(proc)
    assert proc.returncode == 0, f"{out[-2000:]}\n{err[-4000:]}"
    assert "[worker 0] replicas=2 attempt=0" in out
    assert "without TF_CONFIG" in err


def test_killed_worker_fails_the_launch_fast_and_leaves_nothing(tmp_path):
    proc = _launch(tmp_path, script_args=("--epochs", "100", "--batch-sleep", "0.2"))
    pids = []
    try:
        harness.wait_for_file(tmp_path / "training-1-0", proc)
        pids = _pids(tmp_path)
        t0 = time.monotonic()
        os.kill(pids[1], signal.SIGKILL)
        out, err = _finish(proc, timeout=60)
        elapsed = time.monotonic() - t0
        assert proc.returncode == 137, err[-3000:]
        assert "worker 1 was killed by SIGKILL" in err
        assert elapsed < 60
        print(f"launch exited {elapsed:.2f} s after worker 1 was killed")
        time.sleep(0.2)
        assert not any(harness.process_running(p) for p in pids), "a worker survived"
        assert not (tmp_path / "worker-0.json").exists()  # it did not finish
    finally:
        _kill_left(pids)
        _finish(proc, timeout=10)


def test_max_restarts_restarts_the_group_once(tmp_path):
    proc = _launch(
        tmp_path,
        "--max-restarts",
        "1",
        script_args=("--batch-sleep", "0.2", "--slow-attempts", "1", "--slow-epochs", "100"),
    )
    pids = []
    try:
        harness.wait_for_file(tmp_path / "training-1-0", proc)
        first = _pids(tmp_path)
        pids = list(first)
        os.kill(first[1], signal.SIGKILL)
        harness.wait_for_file(tmp_path / "training-1-1", proc)
        pids += _pids(tmp_path)
        out, err = _finish(proc)
        assert proc.returncode == 0, f"{out[-2000:]}\n{err[-4000:]}"
        assert "restarting the group (restart 1 of 1)" in err
        assert err.count("[launch] starting 2 worker(s)") == 2
        w0, w1 = _results(tmp_path)
        assert w0["attempt"] == w1["attempt"] == 1
        assert w0["replicas"] == w1["replicas"] == 2
        assert w0["weights"] == w1["weights"]
        assert not any(harness.process_running(p) for p in pids)
    finally:
        _kill_left(pids)
        _finish(proc, timeout=10)
