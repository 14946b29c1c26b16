"""Elastic on real Ray: lose a node, continue on 1 worker, grow back, same math.

`ray.cluster_utils.Cluster` runs a head (0 CPUs) and two 1-CPU nodes on
127.0.0.1. `tfdist-opt launch --ray ADDRESS -n 1:2 --max-restarts 3` runs
tests/multiworker/scripts/rel_train.py (global batch 8, 36 train calls, a
backup every 4; 0.4 s per call on the first attempt and 2 s on the
second, which the grow cuts short, so there is time to act; the reference
process runs meanwhile) with a fixed
replica count, `replicas=2`, PowerSGD (rank 1 from step 0: its per-replica
residuals are live state) and `grad_accum=3` (the backups of train calls 4
and 8 cut a cycle). Once the backup of train call 8 (optimizer step 2, 2 of 3
micro-batches into the third) exists, node 2 is removed: Ray restarts the
group on the 1 node left, which resumes from Ray's newest checkpoint with 2
logical CPU replicas: per-replica batch, residuals and accumulators those
of 2 replicas. Once that attempt trains, node 2 comes back, Ray grows the
group to 2 workers (`--ray-resize-interval 3`), which resume again. The
final weights equal one uninterrupted process running the same 2 replicas
within 1e-5 (the same examples per replica; only the order of float32
additions differs). ZeRO-1 (`shard_optimizer_state`) cannot be combined
with PowerSGD or `grad_accum`; its resize is tested with launch
(tests/multiworker/test_resize_resume.py).
"""

import concurrent.futures
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

pytest.importorskip("ray.train")

from tests.multiworker import harness  # pylint: disable=g-import-not-at-top
from tests.multiworker import ray_cluster  # pylint: disable=g-import-not-at-top

pytestmark = [pytest.mark.multiworker, pytest.mark.slow]

SCRIPT = "tests/multiworker/scripts/rel_train.py"
KWARGS = json.dumps(dict(replicas=2, compression="powersgd", powersgd_rank=1,
                         powersgd_start_step=0, powersgd_min_compression=0,
                         powersgd_wire="bf16", grad_accum=3))


def _wait(predicate, proc, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"launch ended before {what} ({proc.returncode}):\n"
                                 f"{out[-2000:]}\n{err[-3000:]}")
        time.sleep(0.1)
    os.killpg(proc.pid, 9)  # its logs say why
    out, err = proc.communicate(timeout=30)
    raise AssertionError(f"no {what} within {timeout} s:\n{out[-2000:]}\n"
                         f"{err[-3000:]}")


def test_lose_a_node_continue_on_one_grow_back(tmp_path):
    from ray.cluster_utils import Cluster  # pylint: disable=g-import-not-at-top

    tag = tempfile.mkdtemp(prefix="rt_", dir="/tmp")  # short: socket paths
    saved = {k: os.environ.get(k) for k in ("RAY_TMPDIR", "RAY_AUTH_MODE")}
    os.environ.update(RAY_TMPDIR=tag, RAY_AUTH_MODE="disabled", **ray_cluster.PIN)
    cluster = proc = None
    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        cluster = Cluster(initialize_head=True, shutdown_at_exit=False,
                          head_node_args={"num_cpus": 0, "include_dashboard": False})
        cluster.add_node(num_cpus=1)
        node2 = cluster.add_node(num_cpus=1)
        assert cluster.address.startswith("127.0.0.1:"), cluster.address
        out, backup = tmp_path / "out", tmp_path / "bk"
        proc = subprocess.Popen(
            [sys.executable, "-m", "tfdist_opt", "launch", "--ray", cluster.address,
             "-n", "1:2", "--max-restarts", "3", "--ray-resize-interval", "3",
             "--ray-storage", str(tmp_path / "storage"), "--",
             "python", SCRIPT, "--out", str(out), "--backup", str(backup),
             "--batch-sleep", "0.4", "--sleep-attempts", "2",
             "--later-batch-sleep", "2",
             "--strategy-kwargs", KWARGS],
            env=ray_cluster.env(RAY_TMPDIR=tag), cwd=harness.REPO_ROOT,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True)
        # The uninterrupted reference, while the Ray workers mostly sleep.
        ref_run = pool.submit(harness.run_single, [
            SCRIPT, "--out", str(tmp_path / "ref"), "--backup",
            str(tmp_path / "ref-bk"), "--strategy-kwargs", KWARGS], timeout_s=240)
        # Backups are named by optimizer step: train call 8 is step 2.
        _wait(lambda: (backup / "backup-2").exists(), proc, 240,
              "the backup of train call 8")
        cluster.remove_node(node2, allow_graceful=False)
        _wait(lambda: (out / "training-0-1").exists(), proc, 240,
              "training on 1 worker")
        cluster.add_node(num_cpus=1)
        stdout, stderr = proc.communicate(timeout=300)
        logs = stdout[-3000:] + stderr[-3000:]
        assert proc.returncode == 0, logs
        assert (out / "start-0-1").exists() and not (out / "start-1-1").exists(), (
            "attempt 1 should run on 1 worker: " + logs)
        attempts = sorted(int(n.split("-")[1]) for n in os.listdir(out)
                          if n.startswith("attempt-"))
        last = attempts[-1]
        assert last >= 2, logs
        with open(out / "restored-0-1") as f:
            restored = json.load(f)
        assert restored["step"] in (1, 2) and restored["calls"] % 3, restored
        results = [json.load(open(out / f"attempt-{last}-worker-{i}.json"))
                   for i in range(2)]
        assert [r["replicas"] for r in results] == [2, 2], logs
        # Attempt 1 ran on 1 worker with both replicas.
        assert (out / "replicas-0-1").read_text() == "2", logs
        ref = ref_run.result(timeout=300)
        assert ref.returncode == 0, ref.output[-3000:]
        with open(tmp_path / "ref" / "attempt-0-worker-0.json") as f:
            want = json.load(f)
        for r in results:
            assert r["step"] == 12
            for a, b in zip(r["weights"], want["weights"]):
                np.testing.assert_allclose(np.array(a), np.array(b), rtol=0, atol=1e-5)
    finally:
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.communicate(timeout=30)
        pool.shutdown(wait=True)  # run_single's own timeout bounds it
        if cluster is not None:
            cluster.shutdown()
        ray_cluster.kill_tagged(tag)
        left = ray_cluster.leftovers(tag)
        shutil.rmtree(tag, ignore_errors=True)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    assert not left, left
