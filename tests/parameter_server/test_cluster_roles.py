"""Parameter-server clusters from every source, local launch environments, CLI lines."""

import json
import subprocess
import sys

import pytest

from tfdist_opt.cli import launch as launch_cli
from tfdist_opt.launch import local as launcher
from tfdist_opt.cluster import sources
from tests.multiworker import harness


def test_assign_ps_roles_chief_first_ps_last():
    addrs = [f"h{i}:2222" for i in range(5)]
    cluster, role = sources.assign_ps_roles(addrs, 2, index=4)
    assert cluster == {
        "chief": ["h0:2222"],
        "worker": ["h1:2222", "h2:2222"],
        "ps": ["h3:2222", "h4:2222"],
    }
    assert role == ("ps", 1)
    assert sources.assign_ps_roles(addrs, 2, index=0)[1] == ("chief", 0)
    assert sources.assign_ps_roles(addrs, 2, index=2)[1] == ("worker", 1)
    assert sources.assign_ps_roles(addrs, 2)[1] is None


@pytest.mark.parametrize(
    "n,k,match",
    [
        (3, 2, r"3 task address\(es\) cannot hold 1 chief \+ at least 1 worker \+ 2 ps"),
        (4, 0, r"`--num-ps`: expected a positive int. Received: --num-ps=0"),
    ],
)
def test_assign_ps_roles_names_bad_counts(n, k, match):
    with pytest.raises(ValueError, match=match):
        sources.assign_ps_roles([f"h{i}:1" for i in range(n)], k)


def test_slurm_and_statefulset_sources_assign_ps_roles():
    src = sources.slurm_cluster({"SLURM_JOB_NODELIST": "n[1-4]", "SLURM_PROCID": "3"})
    cluster, role = sources.assign_ps_roles(src.addresses, 2, src.index)
    assert cluster["chief"] == ["n1:2222"] and cluster["ps"] == ["n3:2222", "n4:2222"]
    assert role == ("ps", 1)
    src = sources.statefulset_cluster("tr.svc:2222", 3, {"HOSTNAME": "tr-1"})
    assert sources.assign_ps_roles(src.addresses, 1, src.index)[1] == ("worker", 0)


def test_ps_task_envs_one_tf_config_per_task():
    addrs = ["localhost:1", "localhost:2", "localhost:3", "localhost:4"]
    envs, labels = launcher.ps_task_envs({"X": "1"}, 2, 1, addrs)
    assert labels == ["chief 0", "worker 0", "worker 1", "ps 0"]
    cfgs = [json.loads(e["TF_CONFIG"]) for e in envs]
    assert {json.dumps(c["cluster"], sort_keys=True) for c in cfgs} == {
        json.dumps({"chief": addrs[:1], "worker": addrs[1:3], "ps": addrs[3:]}, sort_keys=True)
    }
    assert [c["task"] for c in cfgs][-1] == {"type": "ps", "index": 0}
    assert all(e["X"] == "1" for e in envs)


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "tfdist_opt", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=harness.REPO_ROOT,
        env=harness.worker_env(0, [1], {"TF_CONFIG": ""}),
    )


def test_tf_config_num_ps_from_slurm_index():
    p = subprocess.run(
        [sys.executable, "-m", "tfdist_opt", "tf-config", "--slurm", "--num-ps", "2"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=harness.REPO_ROOT,
        env=harness.worker_env(
            0, [1], {"TF_CONFIG": "", "SLURM_JOB_NODELIST": "n[1-4]", "SLURM_PROCID": "2"}
        ),
    )
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["task"] == {"type": "ps", "index": 0}


def test_tf_config_num_ps_too_few_hosts_is_named():
    p = _cli("tf-config", "--workers", "h0:1,h1:1", "--num-ps", "1")
    assert p.returncode == 2
    assert "2 task address(es) cannot hold 1 chief + at least 1 worker + 1 ps" in p.stderr


def test_launch_prints_ps_host_commands(capsys):
    assert launch_cli.main(["--workers", "h1:1,h2:1", "--ps", "h3:1", "--", "python", "t.py"]) == 0
    out = capsys.readouterr().out
    assert '"task":{"type":"chief","index":0}' in out
    assert '"ps":["h3:1"]' in out and "# ps 0 on h3:1" in out


@pytest.mark.parametrize(
    "argv,match",
    [
        (["--ps", "h1:2"], "a host list needs the workers' host list too"),
        (["--workers", "2", "--ps", "0"], "expected a positive number of ps tasks"),
        (["--slurm", "--ps", "2"], "tf-config --slurm --num-ps K"),
        (["-n", "2", "--workers", "2"], "both count local workers"),
    ],
)
def test_launch_bad_ps_arguments(argv, match, capsys):
    assert launch_cli.main([*argv, "--", "python", "t.py"]) == 2
    assert match in capsys.readouterr().err


def test_public_names_resolve():
    from tfdist_opt import parameter_server as ps  # pylint: disable=g-import-not-at-top

    for name in ps.__all__:
        assert getattr(ps, name) is not None, name
