"""Ray across two emulated hosts: a head in host 0, a node in host 1.

`ray start --head` in host 0 and `ray start --address=H0:6379` in host 1
(one CPU each), with Ray 2.60's token authentication on (`RAY_AUTH_MODE=
token`, the token in `RAY_AUTH_TOKEN` for every Ray process and the driver,
`HOME` a temporary directory so no real `~/.ray/auth_token` is read or
written). Then `tfdist-opt launch --ray H0:6379 -n 2 -- python -m
tfdist_opt.examples.train_cnn` from host 0: one worker runs in each host
(each prints its network namespace), both end with the same weights, and
those equal the same job on one host's loopback (`tfdist-opt launch -n 2`)
to float32 rounding (as tests/hosts/test_per_host_lines.py).

Then, on the same cluster (the head's health checks shortened as
docs/guides/ray.md advises: `ray_hosts.HEALTH`), a lost host in two ways,
each test leaving Ray running again in host 1:

- every process of host 1 SIGKILLed mid-run under `-n 2 --max-restarts 1`:
  once Ray runs there again the group resumes from Ray's newest checkpoint;
- host 1's link cut under `-n 1:2 --max-restarts 2`: the run goes on at 1
  worker while the host stays cut, and grows back to 2 once it is healed
  and Ray is started there again.

Both end with the weights of one uninterrupted process (rel_train.py with
2 replicas throughout) within 1e-5. Slow on 2 shared cores: starting Ray
and the workers' TensorFlow takes most of the ~3-4 minutes.
"""

import json
import os
import re
import shutil
import sys
import tempfile
import time

import numpy as np
import pytest

from tests.hosts import per_host
from tests.hosts import ray_hosts
from tests.hosts.test_per_host_lines import FAST, _loopback_reference, _weights
from tests.multiworker import harness

pytestmark = [pytest.mark.multiworker, pytest.mark.slow]


@pytest.fixture(scope="module")
def ray_cluster(testbed):
    home = tempfile.mkdtemp(prefix="rh_", dir="/tmp")  # short: Ray's socket paths
    env = ray_hosts.ray_env(home)
    try:
        address = ray_hosts.start_head(testbed, env, home)
        ray_hosts.start_node(testbed, 1, address, env, home)
        yield address, env, home
    finally:
        for host in testbed.hosts:
            testbed.kill_processes(host)
        shutil.rmtree(home, ignore_errors=True)


def _netns(bed, host) -> str:
    return bed.run(host, ["readlink", "/proc/self/ns/net"]).stdout.strip()


def test_launch_ray_runs_one_worker_per_host_with_one_host_weights(testbed, ray_cluster, tmp_path):
    address, env, home = ray_cluster
    npz = os.path.join(home, "ray.npz")
    with harness.alongside(_loopback_reference, tmp_path / "one_host.npz") as reference:
        launch = testbed.run(
            0,
            [
                sys.executable,
                "-m",
                "tfdist_opt",
                "launch",
                "--ray",
                address,
                "-n",
                "2",
                # Each worker says which network namespace (host) it runs in, then
                # runs the main job.
                "--",
                "python",
                "tests/hosts/scripts/netns_main_job.py",
                *FAST,
                "--weights_npz",
                npz,
            ],
            env=env,
            timeout=400,
        )
    out = launch.stdout
    assert launch.returncode == 0, out[-5000:]
    namespaces = sorted(
        line.split("NETNS ", 1)[1].strip() for line in out.splitlines() if "NETNS " in line
    )
    assert namespaces == sorted([_netns(testbed, 0), _netns(testbed, 1)]), out[-3000:]
    results = per_host.results("\n".join(line.split("] ", 1)[-1] for line in out.splitlines()))
    assert sorted(r["task"] for r in results) == ["worker:0", "worker:1"], out[-3000:]
    assert len({r["weights_sha256"] for r in results}) == 1, results
    ref = reference.result()
    assert ref.returncode == 0, (ref.stdout + ref.stderr)[-4000:]
    for got, want in zip(_weights(npz), _weights(tmp_path / "one_host.npz")):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=5e-5)


KWARGS = json.dumps({"replicas": 2})  # 2 replicas on 1 or 2 workers: the same math


def _reference(tmp_path):
    """rel_train.py in one uninterrupted process with the same 2 replicas."""
    return harness.run_single(
        [
            ray_hosts.SCRIPT,
            "--out",
            str(tmp_path / "ref"),
            "--backup",
            str(tmp_path / "ref-bk"),
            "--strategy-kwargs",
            KWARGS,
        ],
        timeout_s=400,
    )


def _assert_equal_to_reference(run, ref, tmp_path):
    final = run.finished()
    assert final is not None, run.text()
    paths = [run.out / f"attempt-{final}-worker-{i}.json" for i in range(2)]
    assert all(p.exists() for p in paths), (final, run.text())
    results = [json.load(open(p)) for p in paths]
    assert [r["replicas"] for r in results] == [2, 2], run.text()
    ref = ref.result()
    assert ref.returncode == 0, ref.output[-3000:]
    with open(tmp_path / "ref" / "attempt-0-worker-0.json") as f:
        want = json.load(f)
    for r in results:
        assert r["step"] == want["step"] == 36, (r["step"], want["step"])
        for a, b in zip(r["weights"], want["weights"]):
            np.testing.assert_allclose(np.array(a), np.array(b), rtol=0, atol=1e-5)


def _reported_by_both(run):
    text = run.text(tail=10**6)
    return True if all(f"[worker {i}] Reporting training result" in text for i in (0, 1)) else None


def test_a_killed_worker_host_resumes_from_the_ray_checkpoint(testbed, ray_cluster, tmp_path):
    """Issue 51 (A): `-n 2 --max-restarts 1`, every process of host 1 SIGKILLed.

    Host 1's raylet and its Ray worker die mid-run (a host crash); Ray is
    started there again (the host back), and the group of 2 resumes from
    Ray's newest checkpoint: each attempt backs up into its own directory
    (`--backup .../{attempt}`), so nothing else can resume it. The final
    weights equal one uninterrupted process.
    """
    address, env, home = ray_cluster
    run = None
    with harness.alongside(_reference, tmp_path) as ref:
        try:
            pace = tmp_path / "pace"
            pace.write_text("hold")
            run = ray_hosts.Launch(
                testbed,
                address,
                env,
                ["-n", "2", "--max-restarts", "1", "--ray-storage", str(tmp_path / "storage")],
                tmp_path / "out",
                tmp_path / "bk" / "{attempt}",
                pace,
                KWARGS,
            )
            first = run.wait(lambda: run.attempt_on([0, 1], -1), 300, "an attempt on 2 workers")
            run.set_pace("0.3")
            bk0 = tmp_path / "bk" / str(first)
            run.wait(lambda: run.backup_after(1, bk0), 120, "a backup on 2 workers")
            run.set_pace("5")  # no further backup before the kill
            # Ray keeps a checkpoint once every worker has reported it and
            # the controller's next poll (0.5 s) has taken the reports.
            run.wait(lambda: _reported_by_both(run), 60, "both workers' report")
            time.sleep(5)  # pace 5: no further backup meanwhile
            ray_hosts.restart_node(testbed, 1, address, env, home)
            run.set_pace("0.3")
            again = run.wait(lambda: run.attempt_on([0, 1], first), 300, "2 workers again")
            run.set_pace("0")
            assert run.finish(300) == 0, run.text()
        finally:
            if run is not None and run.proc.poll() is None:
                testbed.kill(run.proc)
    # The launcher's summary line, searched in the whole output: Ray may print
    # the killed raylet's log after it, more than the 4000 characters of
    # `run.text()`'s tail.
    summary = [line for line in run.lines if " restart(s), " in line]
    assert summary and "(1 restart(s)" in summary[-1], (summary, run.text())
    restored = [json.load(open(run.out / f"restored-{i}-{again}")) for i in range(2)]
    assert restored[0] == restored[1], restored
    assert restored[0] is not None and restored[0]["step"] >= 4, restored
    _assert_equal_to_reference(run, ref, tmp_path)


def test_a_cut_host_goes_on_at_one_worker_and_grows_back(testbed, ray_cluster, tmp_path):
    """Issue 51 (B): `-n 1:2 --max-restarts 2`, host 1's link cut mid-run.

    The run goes on at 1 worker from the newest backup while host 1 stays
    cut (the head declares the silent node dead, `ray_hosts.HEALTH`, and
    `tfdist_opt.launch.ray_elastic` sizes the restart from the nodes that
    answer); the link healed and Ray started again in host 1 (a node Ray
    declared dead does not come back by itself), the group grows back to 2
    workers; the final weights equal one uninterrupted process.
    """
    address, env, home = ray_cluster
    run = None
    with harness.alongside(_reference, tmp_path) as ref:
        try:
            pace = tmp_path / "pace"
            pace.write_text("hold")
            run = ray_hosts.Launch(
                testbed,
                address,
                env,
                ["-n", "1:2", "--max-restarts", "2", "--ray-resize-interval", "3"]
                + ["--ray-storage", str(tmp_path / "storage")],
                tmp_path / "out",
                tmp_path / "bk",
                pace,
                KWARGS,
            )
            first = run.wait(lambda: run.attempt_on([0, 1], -1), 300, "an attempt on 2 workers")
            run.set_pace("0.3")
            run.wait(lambda: run.backup_after(1), 120, "a backup on 2 workers")
            run.set_pace("5")  # no further backup before the cut
            cut_at = time.time()
            testbed.cut(1)
            cut = time.monotonic()
            run.set_pace("0.3")
            one = run.wait(lambda: run.attempt_on([0], first), 240, "training on 1 worker")
            shrink_s = time.monotonic() - cut
            newest = run.backup_after(-1)
            grown_from = run.wait(lambda: run.backup_after(newest), 120, "a backup on 1 worker")
            run.set_pace("5")
            before_heal = run.text(tail=10**6)
            testbed.heal(1)
            healed = time.monotonic()
            ray_hosts.restart_node(testbed, 1, address, env, home)
            last = run.wait(lambda: run.attempt_on([0, 1], one), 240, "2 workers again")
            grow_s = time.monotonic() - healed
            print(
                f"cut -> 1 worker training in {shrink_s:.1f} s (attempt {one}); "
                f"healed -> 2 workers training in {grow_s:.1f} s (attempt {last})"
            )
            print("\n".join(ln for ln in before_heal.splitlines() if ln.startswith("[launch] Ray")))
            run.set_pace("0")
            assert run.finish(300) == 0, run.text()
        finally:
            testbed.heal(1)
            if run is not None and run.proc.poll() is None:
                testbed.kill(run.proc)
    # While host 1 was cut: the launcher's output named the node it waited
    # for, and the restart after the cut was sized from the nodes left
    # (tfdist_opt.launch.ray_elastic), not at 2 workers on a stale view of
    # the nodes, which waits 60 s for a placement on the lost host.
    assert re.search(
        rf"\[launch\] Ray declared node\(s\) {re.escape(testbed[1].address)} \(\w+\) dead"
        r".*: the group restarts on the nodes left",
        before_heal,
    ), before_heal
    starts = ray_hosts.group_starts(home)
    assert [n for t, n in starts if t > cut_at][:1] == [1], starts
    with open(run.out / f"restored-0-{one}") as f:
        assert json.load(f)["step"] >= 4, run.text()
    assert (run.out / f"replicas-0-{one}").read_text() == "2", run.text()
    with open(run.out / f"restored-0-{last}") as f:
        assert json.load(f)["step"] >= grown_from, run.text()
    _assert_equal_to_reference(run, ref, tmp_path)
