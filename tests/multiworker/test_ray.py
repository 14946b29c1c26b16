"""`tfdist-opt launch --ray`: the same script, the same math, on real Ray.

One Ray head on 127.0.0.1 (`ray start`, pinned to loopback) serves the two
training tests; the contract test starts and stops its own local Ray
through the launcher. The script is tests/multiworker/scripts/rel_train.py
(36 SGD-with-momentum steps, global batch 8, unshuffled, a backup every 4
steps), so runs compare exactly:

- 2 Ray workers == 2 `tfdist-opt launch` workers == 1 process, weights
  within 1e-6 (only the order of float32 additions differs);
- a worker SIGKILLed after step 10 with `--max-restarts 1`
  (`FailureConfig(max_failures=1)`): Ray restarts the group, which resumes
  from Ray's stored checkpoint (step 4 or 8; each attempt gets a fresh,
  empty `backup_dir`, so nothing else could resume it) and ends within 1e-6
  of the uninterrupted run.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pytest

pytest.importorskip("ray.train")

from tests.multiworker import harness  # pylint: disable=g-import-not-at-top
from tests.multiworker import ray_cluster  # pylint: disable=g-import-not-at-top
from tests.multiworker.scripts import rel_launch  # pylint: disable=g-import-not-at-top
from tfdist_opt.launch import ray_launch  # pylint: disable=g-import-not-at-top

pytestmark = [pytest.mark.multiworker, pytest.mark.slow]

SCRIPT = "tests/multiworker/scripts/rel_train.py"
ATOL = 1e-6


@pytest.fixture(scope="module")
def single_run(tmp_path_factory):
    """The one-process reference, started first: it runs while Ray starts."""
    d = tmp_path_factory.mktemp("single")
    with harness.alongside(
        harness.run_single, [SCRIPT, "--out", str(d), "--backup", str(d / "bk")], timeout_s=180
    ) as run:
        yield d, run


@pytest.fixture(scope="module")
def head(single_run):
    h = ray_cluster.Head(num_cpus=2)
    try:
        yield h
    finally:
        h.stop()
        assert not ray_cluster.leftovers(h.temp_dir)


@pytest.fixture(scope="module")
def single(single_run):
    d, run = single_run
    r = run.result(timeout=240)
    assert r.returncode == 0, r.output[-3000:]
    return _load(d / "attempt-0-worker-0.json")


def _load(path):
    with open(path) as f:
        return json.load(f)


def _launch_ray(args, timeout=300, env=None):
    cmd = [sys.executable, "-m", "tfdist_opt", "launch", *args]
    return subprocess.run(
        cmd,
        env=env or ray_cluster.env(),
        cwd=harness.REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        timeout=timeout,
    )


def _assert_weights_close(got, want, what):
    for a, b in zip(got["weights"], want["weights"]):
        np.testing.assert_allclose(np.array(a), np.array(b), rtol=0, atol=ATOL, err_msg=what)


def test_two_ray_workers_equal_launch_and_one_process(head, single, tmp_path, tmp_path_factory):
    # The 2-worker `tfdist-opt launch` run of the same script: the session's
    # one (scripts/rel_launch.py), which the restart tests compare with too.
    launched = rel_launch.reference(tmp_path_factory)["workers"]
    out = tmp_path / "ray"
    r = _launch_ray(
        [
            "--ray",
            head.address,
            "-n",
            "2",
            "--",
            "python",
            SCRIPT,
            "--out",
            str(out),
            "--backup",
            str(tmp_path / "ray-bk"),
        ]
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "[worker 0] DONE attempt=0 step=36" in r.stdout
    assert "[worker 1] DONE attempt=0 step=36" in r.stdout
    on_ray = [_load(out / f"attempt-0-worker-{i}.json") for i in range(2)]
    for w in on_ray:
        assert w["replicas"] == 2 and w["step"] == 36
        # The controller took the 12 backups' reports every 0.5 s, not 2 s
        # (Ray's default, which made each backup wait in `ray.train.report`).
        assert w["ray_poll_s"] == ray_launch.REPORT_POLL_S, w["ray_poll_s"]
        hosts = json.loads(w["tf_config"])["cluster"]["worker"]
        assert [h.rsplit(":", 1)[0] for h in hosts] == ["127.0.0.1"] * 2, hosts
    assert on_ray[0]["weights"] == on_ray[1]["weights"]
    _assert_weights_close(on_ray[0], launched[0], "Ray vs launch")
    _assert_weights_close(on_ray[0], single, "Ray vs one process")
    _assert_weights_close(launched[0], single, "launch vs one process")


def test_sigkilled_worker_resumes_from_ray_checkpoint(head, single, tmp_path):
    out = tmp_path / "out"
    r = _launch_ray(
        [
            "--ray",
            head.address,
            "-n",
            "2",
            "--max-restarts",
            "1",
            "--ray-storage",
            str(tmp_path / "ray-storage"),
            "--",
            "python",
            SCRIPT,
            "--out",
            str(out),
            "--backup",
            str(tmp_path / "bk-{attempt}"),
            "--batch-sleep",
            "0.6",
            "--crash-task",
            "1",
            "--crash-at-step",
            "10",
            "--crash-sigkill",
        ],
        timeout=400,
    )
    logs = r.stdout[-3000:] + r.stderr[-3000:]
    assert r.returncode == 0, logs
    assert "(1 restart(s)" in r.stderr, logs
    assert (out / "crash-1").exists()
    # Attempt 1's backup_dir starts empty: only Ray's stored checkpoints can
    # resume it. Ray registers a report at its next poll (every 2 s): the
    # step-4 backup (3.6 s before the kill) surely, step 8 (1.2 s) maybe.
    restored = [_load(out / f"restored-{i}-1") for i in range(2)]
    assert restored[0] == restored[1], restored
    assert restored[0] is not None and restored[0]["step"] in (4, 8), restored
    for i in range(2):
        result = _load(out / f"attempt-1-worker-{i}.json")
        assert result["step"] == 36
        _assert_weights_close(result, single, f"resumed worker {i} vs one process")
    # One stored copy per backup (not one per worker), each a whole backup:
    # attempt 1's saves after step 8 are 12, 12 (epoch end), 16, ..., 36, 36.
    storage = tmp_path / "ray-storage" / "tfdist_opt_launch"
    stored = [d for d in os.listdir(storage) if (storage / d / "manifest.json").exists()]
    steps = sorted(_load(storage / d / "manifest.json")["step"] for d in stored)
    assert [s for s in steps if s > 8] == [12, 12, 16, 20, 24, 24, 28, 32, 36, 36], steps


# Worker 1 fails each attempt only after worker 0 has printed: a failing
# worker ends the group, and under load worker 0's script may not have
# started yet when worker 1's ends (a CI run saw attempt 1 without worker
# 0's lines). The marker is written after the prints; the second of wait
# covers their way from the pipe to the launcher's queue.
CONTRACT_SCRIPT = """
import os, sys, time
index = int(os.environ["TFDIST_LAUNCH_WORKER_INDEX"])
attempt = int(os.environ["TFDIST_LAUNCH_RESTART_COUNT"])
print(f"hello from {index} of {os.environ['TFDIST_LAUNCH_NUM_WORKERS']}, attempt {attempt}")
print(f"to stderr {index}", file=sys.stderr)
marker = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"printed-{attempt}")
if index == 0:
    open(marker, "w").close()
if index == 1:
    deadline = time.monotonic() + 120
    while not os.path.exists(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1)
    sys.exit(42 if attempt == 0 else 3)
"""


def test_launch_ray_local_contract(tmp_path):
    """A local Ray started and stopped for the run: prefixed output, the
    restart after exit 42, the failing worker's exit code, nothing left."""
    script = tmp_path / "contract.py"
    script.write_text(CONTRACT_SCRIPT)
    tag = tempfile.mkdtemp(prefix="rt_", dir="/tmp")  # short: socket paths
    env = ray_cluster.env(RAY_TMPDIR=str(tag))
    try:
        r = _launch_ray(
            ["--ray", "-n", "2", "--max-restarts", "1", "--", "python", str(script)],
            env=env,
            timeout=240,
        )
        logs = r.stdout[-3000:] + r.stderr[-3000:]
        assert r.returncode == 3, logs
        for attempt in (0, 1):
            assert f"[worker 0] hello from 0 of 2, attempt {attempt}" in r.stdout, logs
            assert f"[worker 1] hello from 1 of 2, attempt {attempt}" in r.stdout, logs
        assert "[worker 1] to stderr 1" in r.stderr, logs
        assert "worker 1 exited with code 3 (1 restart(s)" in r.stderr, logs
        assert not ray_cluster.leftovers(tag)
    finally:
        ray_cluster.kill_tagged(tag)
        shutil.rmtree(tag, ignore_errors=True)
