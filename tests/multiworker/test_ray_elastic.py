"""Elastic on real Ray: lose a node, continue on 1 worker, grow back, same math.

`ray.cluster_utils.Cluster` runs a head (0 CPUs) and two 1-CPU nodes on
127.0.0.1. `tfdist-opt launch --ray ADDRESS -n 1:2 --max-restarts 3` runs
tests/multiworker/scripts/rel_train.py (global batch 8, 36 train calls, a
backup every 4) with a fixed replica count, `replicas=2`, PowerSGD (rank 1
from step 0: its per-replica residuals are live state) and `grad_accum=3`
(the backups of train calls 4 and 8 cut a cycle). The test paces the workers
by phase through a file (`--pace-file`: seconds after each batch, or `hold`
until told otherwise), never by attempt number, since Ray decides how many
attempts a resize takes:

1. a 2-worker attempt trains; once the backup of train call 8 (optimizer
   step 2, 2 of 3 micro-batches into the third) is committed, the workers
   slow down and node 2 is removed (SIGKILL, a lost node): worker 0's next
   collective fails;
2. Ray restarts the group on the 1 node left, which resumes from Ray's
   newest checkpoint with 2 logical CPU replicas (per-replica batch,
   residuals and accumulators those of 2 replicas) and writes a backup of
   its own; then it slows down and node 2 comes back;
3. Ray grows the group to 2 workers (`--ray-resize-interval 3`), which
   resume from the 1-worker backup and run to the end.

The final weights equal one uninterrupted process running the same 2
replicas within 1e-5 (the same examples per replica; only the order of
float32 additions differs). ZeRO-1 (`shard_optimizer_state`) cannot be
combined with PowerSGD or `grad_accum`; its resize is tested with launch
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
KWARGS = json.dumps(
    dict(
        replicas=2,
        compression="powersgd",
        powersgd_rank=1,
        powersgd_start_step=0,
        powersgd_min_compression=0,
        powersgd_wire="bf16",
        grad_accum=3,
    )
)


def _wait(predicate, proc, timeout, what):
    """Polls `predicate` until it returns something not None; returns that."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found is not None:
            return found
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(
                f"launch ended before {what} ({proc.returncode}):\n{out[-2000:]}\n{err[-3000:]}"
            )
        time.sleep(0.1)
    os.killpg(proc.pid, 9)  # its logs say why
    out, err = proc.communicate(timeout=30)
    raise AssertionError(f"no {what} within {timeout} s:\n{out[-2000:]}\n{err[-3000:]}")


def _set(pace, value):
    """Writes the pace file in one step (a worker never reads half of it)."""
    tmp = pace.with_suffix(".tmp")
    tmp.write_text(value)
    os.replace(tmp, pace)


def _trained(out, after=-1):
    """{attempt: sorted worker indices that trained a batch}, attempts > after."""
    seen = {}
    for name in os.listdir(out) if out.exists() else ():
        if name.startswith("training-"):
            _, index, attempt = name.split("-")
            if int(attempt) > after:
                seen.setdefault(int(attempt), []).append(int(index))
    return {a: sorted(v) for a, v in seen.items()}


def _attempt_on(out, workers, after):
    """The newest attempt > `after` whose workers `workers` trained, or None."""
    hits = [a for a, w in _trained(out, after).items() if w == workers]
    return max(hits) if hits else None


def _finished(out):
    """The newest attempt whose worker 0 wrote its final result, or None."""
    done = [
        int(n.split("-")[1])
        for n in os.listdir(out)
        if n.startswith("attempt-") and n.endswith("-worker-0.json")
    ]
    return max(done) if done else None


def _backup_after(backup, step):
    """The newest committed backup step > `step`, or None."""
    steps = (
        [
            int(n.split("-")[1])
            for n in os.listdir(backup)
            if n.startswith("backup-") and (backup / n / "manifest.json").exists()
        ]
        if backup.exists()
        else []
    )
    steps = [s for s in steps if s > step]
    return max(steps) if steps else None


def test_lose_a_node_continue_on_one_grow_back(tmp_path):
    from ray.cluster_utils import Cluster  # pylint: disable=g-import-not-at-top

    tag = tempfile.mkdtemp(prefix="rt_", dir="/tmp")  # short: socket paths
    saved = {k: os.environ.get(k) for k in ("RAY_TMPDIR", "RAY_AUTH_MODE")}
    os.environ.update(RAY_TMPDIR=tag, RAY_AUTH_MODE="disabled", **ray_cluster.PIN)
    cluster = proc = None
    pool = concurrent.futures.ThreadPoolExecutor(1)
    pace = tmp_path / "pace"
    _set(pace, "hold")
    try:
        cluster = Cluster(
            initialize_head=True,
            shutdown_at_exit=False,
            head_node_args={
                "num_cpus": 0,
                "include_dashboard": False,
                # a lost node is declared dead in ~2 s, not Ray's ~15 s
                "_system_config": {
                    "health_check_initial_delay_ms": 1000,
                    "health_check_period_ms": 500,
                    "health_check_timeout_ms": 1000,
                    "health_check_failure_threshold": 3,
                },
            },
        )
        cluster.add_node(num_cpus=1)
        node2 = cluster.add_node(num_cpus=1)
        cluster.wait_for_nodes()
        assert cluster.address.startswith("127.0.0.1:"), cluster.address
        out, backup = tmp_path / "out", tmp_path / "bk"
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tfdist_opt",
                "launch",
                "--ray",
                cluster.address,
                "-n",
                "1:2",
                "--max-restarts",
                "3",
                "--ray-resize-interval",
                "3",
                "--ray-storage",
                str(tmp_path / "storage"),
                "--",
                "python",
                SCRIPT,
                "--out",
                str(out),
                "--backup",
                str(backup),
                "--pace-file",
                str(pace),
                "--strategy-kwargs",
                KWARGS,
            ],
            env=ray_cluster.env(RAY_TMPDIR=tag),
            cwd=harness.REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        # The uninterrupted reference, while the Ray workers mostly wait.
        ref_run = pool.submit(
            harness.run_single,
            [
                SCRIPT,
                "--out",
                str(tmp_path / "ref"),
                "--backup",
                str(tmp_path / "ref-bk"),
                "--strategy-kwargs",
                KWARGS,
            ],
            timeout_s=240,
        )
        # 1. Two workers train up to the backup of train call 8 (step 2).
        first = _wait(lambda: _attempt_on(out, [0, 1], -1), proc, 240, "an attempt on 2 workers")
        _set(pace, "0.3")
        _wait(lambda: _backup_after(backup, 1), proc, 120, "the backup of train call 8")
        _set(pace, "5")  # no further backup before the node is gone
        removed_at = time.time()
        cluster.remove_node(node2, allow_graceful=False)
        t_removed = time.monotonic()
        _set(pace, "0.3")  # worker 0's next collective fails: Ray restarts
        # 2. One worker resumes there and writes a backup of its own.
        one = _wait(lambda: _attempt_on(out, [0], first), proc, 240, "training on 1 worker")
        shrink_s = time.monotonic() - t_removed
        newest = _backup_after(backup, -1)
        grown_from = _wait(lambda: _backup_after(backup, newest), proc, 120, "a backup on 1 worker")
        _set(pace, "5")
        cluster.add_node(num_cpus=1)
        t_added = time.monotonic()
        # 3. Ray grows the group back to 2 workers; they run to the end.
        last = _wait(
            lambda: _attempt_on(out, [0, 1], one), proc, 240, "training on 2 workers again"
        )
        grow_s = time.monotonic() - t_added
        print(
            f"node removed -> 1 worker training in {shrink_s:.1f} s (attempt "
            f"{one}); node back -> 2 workers training in {grow_s:.1f} s "
            f"(attempt {last})"
        )
        _set(pace, "0")
        stdout, stderr = proc.communicate(timeout=300)
        logs = stdout[-3000:] + stderr[-3000:]
        assert proc.returncode == 0, logs
        with open(out / f"restored-0-{one}") as f:
            restored = json.load(f)
        assert restored["step"] == 2 and restored["calls"] % 3, restored
        # The restart after the loss was sized from the nodes left
        # (tfdist_opt.launch.ray_elastic): not at 2 workers on a stale view
        # of the nodes, which waits 60 s for a placement no node can hold.
        starts = ray_cluster.group_starts(os.path.join(tag, "ray"))
        assert [n for t, n in starts if t > removed_at][:1] == [1], starts
        assert (out / f"replicas-0-{one}").read_text() == "2", logs
        with open(out / f"restored-0-{last}") as f:
            assert json.load(f)["step"] >= grown_from, logs
        # The attempt that finished: `last`, unless Ray restarted the group
        # once more (under heavy load a health check can miss); any later
        # attempt resumes from a backup too and must end the same.
        final = _finished(out)
        assert final is not None and final >= last, (final, last, logs)
        paths = [out / f"attempt-{final}-worker-{i}.json" for i in range(2)]
        assert all(p.exists() for p in paths), (final, logs)
        results = [json.load(open(p)) for p in paths]
        assert [r["replicas"] for r in results] == [2, 2], logs
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
