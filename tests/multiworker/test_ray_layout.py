"""The launch layout on Ray: GPUs, forwarded variables, a Ray of our own.

One head that declares 2 GPUs on this CPU host serves the module. Ray assigns `CUDA_VISIBLE_DEVICES` to workers that ask it for GPUs, also
on a machine without any, when its node declares `--num-gpus`: enough to
check that each worker gets its own, and that asking for more than the
cluster has fails by name at once instead of waiting for resources.
"""

import subprocess
import sys
import time

import pytest

pytest.importorskip("ray.train")

from tests.multiworker import harness  # pylint: disable=g-import-not-at-top
from tests.multiworker import ray_cluster  # pylint: disable=g-import-not-at-top

pytestmark = [pytest.mark.multiworker, pytest.mark.slow]


@pytest.fixture(scope="module")
def head():
    h = ray_cluster.Head(num_cpus=2, num_gpus=2)
    try:
        yield h
    finally:
        h.stop()
        assert not ray_cluster.leftovers(h.temp_dir)


def _launch(args, timeout, **extra_env):
    return subprocess.run(
        [sys.executable, "-m", "tfdist_opt", "launch", *args],
        env=ray_cluster.env(**extra_env),
        cwd=harness.REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        timeout=timeout,
    )


SHOW = (
    "import os\nfor k in ('CUDA_VISIBLE_DEVICES', 'TFDIST_OPT_COMPRESSION', "
    "'MY_DATA_DIR', 'TF_CONFIG'):\n    v = os.environ.get(k, 'unset')\n"
    "    print(k + '=' + (v if k != 'TF_CONFIG' or v == 'unset' else 'set'), "
    "flush=True)\n"
)


def test_each_ray_worker_gets_its_own_gpu_and_the_launchers_env(head, tmp_path):
    """One run, two properties of the layout on Ray (each run costs ~30 s):
    GPUs by default (1 each, disjoint) and the forwarded variables."""
    script = tmp_path / "show.py"
    script.write_text(SHOW)
    r = _launch(
        [
            "--ray",
            head.address,
            "-n",
            "2",
            "--env",
            "MY_DATA_DIR=/data",
            "--",
            sys.executable,
            str(script),
        ],
        timeout=240,
        TFDIST_OPT_COMPRESSION="bf16",
    )
    assert r.returncode == 0, r.stderr[-3000:]
    seen = sorted(
        line.split("CUDA_VISIBLE_DEVICES=", 1)[1]
        for line in r.stdout.splitlines()
        if "CUDA_VISIBLE_DEVICES=" in line
    )
    assert len(seen) == 2 and seen[0] != seen[1], r.stdout
    assert set(seen) <= {"0", "1"}, seen
    for rank in (0, 1):
        assert f"[worker {rank}] TFDIST_OPT_COMPRESSION=bf16" in r.stdout, r.stdout
        assert f"[worker {rank}] MY_DATA_DIR=/data" in r.stdout, r.stdout
        assert f"[worker {rank}] TF_CONFIG=set" in r.stdout  # its own, not ours
    start = next(line for line in r.stderr.splitlines() if "starting 2 Ray" in line)
    assert "GPUs: 1 per worker (the default when the Ray cluster has GPUs" in start
    assert "MY_DATA_DIR" in start and "TFDIST_OPT_COMPRESSION" in start, start


def test_more_gpus_than_the_cluster_has_fails_at_once(head, tmp_path):
    script = tmp_path / "never.py"
    script.write_text("raise SystemExit('started')\n")
    t0 = time.monotonic()
    r = _launch(
        [
            "--ray",
            head.address,
            "-n",
            "2",
            "--gpus-per-worker",
            "2",
            "--",
            sys.executable,
            str(script),
        ],
        timeout=120,
    )
    took = time.monotonic() - t0
    assert r.returncode == 2, r.stderr[-3000:]
    assert "need 4, but the Ray cluster has 2" in r.stderr
    assert "started" not in r.stdout + r.stderr
    assert took < 60, took  # the join itself, not a wait for resources


def test_local_ray_is_our_own_even_beside_another_instance(head, tmp_path):
    """With another Ray found (RAY_ADDRESS, or the newest `ray start` on the
    host), `launch --ray -n N` still starts and stops a Ray of its own."""
    script = tmp_path / "one.py"
    script.write_text("print('ran', flush=True)\n")
    r = _launch(
        ["--ray", "-n", "1", "--", sys.executable, str(script)],
        timeout=240,
        RAY_ADDRESS=head.address,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Ray local instance started" in r.stderr
    assert "[worker 0] ran" in r.stdout


@pytest.fixture(scope="module")
def token_head(tmp_path_factory):
    """A head that requires its token; the token lives in a private HOME."""
    home = tmp_path_factory.mktemp("home")
    subprocess.run(
        [ray_cluster.RAY, "get-auth-token", "--generate"],
        env=ray_cluster.env(HOME=str(home)),
        check=True,
        timeout=60,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    assert (home / ".ray" / "auth_token").exists()
    h = ray_cluster.Head(num_cpus=1, extra_env={"HOME": str(home), "RAY_AUTH_MODE": "token"})
    try:
        yield h, home
    finally:
        h.stop()
        assert not ray_cluster.leftovers(h.temp_dir)


def test_ray_token_is_found_where_ray_reads_it_or_named_at_once(token_head, tmp_path):
    h, home = token_head
    script = tmp_path / "one.py"
    script.write_text("print('ran', flush=True)\n")
    args = ["--ray", h.address, "-n", "1", "--", sys.executable, str(script)]
    env = {
        k: v for k, v in ray_cluster.env(HOME=str(tmp_path)).items() if k != "RAY_AUTH_MODE"
    }  # what a user has: no mode, no token here
    t0 = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "tfdist_opt", "launch", *args],
        env=env,
        cwd=harness.REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
    )
    took = time.monotonic() - t0
    assert r.returncode == 2, r.stderr[-3000:]
    assert "requires its auth token, and none was found" in r.stderr
    assert "Fix: copy the head's ~/.ray/auth_token" in r.stderr
    assert took < 5, took
    env["HOME"] = str(home)  # the head's token, in ~/.ray/auth_token
    r = subprocess.run(
        [sys.executable, "-m", "tfdist_opt", "launch", *args],
        env=env,
        cwd=harness.REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        timeout=240,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert f"(Ray auth token from {home / '.ray' / 'auth_token'})" in r.stderr
    assert "[worker 0] ran" in r.stdout


def test_more_workers_than_the_nodes_hold_fails_at_once(token_head, tmp_path):
    """`-n 2` on one 1-CPU node: Ray would wait for room without a word."""
    h, home = token_head
    script = tmp_path / "never.py"
    script.write_text("raise SystemExit('started')\n")
    t0 = time.monotonic()
    r = _launch(
        ["--ray", h.address, "-n", "2", "--", sys.executable, str(script)],
        timeout=120,
        HOME=str(home),
        RAY_AUTH_MODE="token",
    )
    took = time.monotonic() - t0
    assert r.returncode == 2, r.stderr[-3000:]
    assert (
        "2 Ray worker(s) asking {CPU 1} each do not fit the Ray cluster: its "
        "nodes hold 1 (127.0.0.1: CPU 1; ray.nodes()). Received: -n 2."
    ) in r.stderr, r.stderr[-3000:]
    assert "started" not in r.stdout + r.stderr
    assert took < 60, took  # the join itself, not a wait for resources
