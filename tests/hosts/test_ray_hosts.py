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

Slow on 2 shared cores: starting the head, the node and the run's Ray
actors takes most of the ~2 minutes.
"""

import os
import secrets
import shutil
import sys
import tempfile

import numpy as np
import pytest

from tests.hosts import per_host
from tests.hosts.test_per_host_lines import FAST, _loopback_reference, _weights
from tests.multiworker import harness

pytestmark = [pytest.mark.multiworker, pytest.mark.slow]

RAY = os.path.join(os.path.dirname(sys.executable), "ray")


def _ray_env(home: str) -> dict:
    env = per_host.host_env(
        {
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": secrets.token_hex(32),
            "HOME": home,
            "RAY_USAGE_STATS_ENABLED": "0",
        }
    )
    # tests/conftest.py pins Ray to 127.0.0.1 with this; across hosts Ray
    # refuses a second node while it is set ("not supported on Windows and OSX").
    env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
    return env


@pytest.fixture(scope="module")
def ray_cluster(testbed):
    home = tempfile.mkdtemp(prefix="rh_", dir="/tmp")  # short: Ray's socket paths
    env = _ray_env(home)
    h0, h1 = testbed[0].address, testbed[1].address
    common = ["--num-cpus=1", "--disable-usage-stats", "--object-store-memory=100000000"]
    try:
        head = testbed.run(
            0,
            [
                RAY,
                "start",
                "--head",
                f"--node-ip-address={h0}",
                "--port=6379",
                "--include-dashboard=false",
                *common,
                f"--temp-dir={home}/t0",
            ],
            env=env,
            timeout=150,
        )
        assert head.returncode == 0, head.stdout[-3000:]
        node = testbed.run(
            1,
            [
                RAY,
                "start",
                f"--address={h0}:6379",
                f"--node-ip-address={h1}",
                *common,
                f"--temp-dir={home}/t1",
            ],
            env=env,
            timeout=150,
        )
        assert node.returncode == 0, node.stdout[-3000:]
        yield f"{h0}:6379", env, home
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
