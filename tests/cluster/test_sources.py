"""Cluster sources against realistic values: host lists, hostfiles, SLURM, k8s."""

import socket

import pytest

from tfdist_opt.cluster import sources
from tfdist_opt.cluster import tf_config as tc


# ------------------------------------------------------------ host list
def test_host_list():
    assert sources.parse_host_list("h1:2222, h2:2223") == ["h1:2222", "h2:2223"]
    assert sources.parse_host_list("h1,h2:9", default_port=2222) == ["h1:2222", "h2:9"]
    assert sources.parse_host_list("[fd00::1]:5") == ["[fd00::1]:5"]


@pytest.mark.parametrize(
    "text,match",
    [
        ("h1:2222,,h2:2222", "entry 1 is empty"),
        ("h1:2222,h2", "entry 'h2' needs a port"),
        ("h1:x", "entry 'h1:x' needs a port"),
        ("h1:99999", "entry 'h1:99999' needs a port in 1..65535"),
    ],
)
def test_host_list_errors(text, match):
    with pytest.raises(ValueError, match=match):
        sources.parse_host_list(text)


def test_local_addresses_use_distinct_free_loopback_ports():
    addrs = sources.local_addresses(3)
    ports = [int(a.split(":")[1]) for a in addrs]
    assert all(a.startswith("localhost:") for a in addrs)
    assert len(set(ports)) == 3
    for p in ports:  # free right now
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))
    tc.build_tf_config({"worker": addrs}, "worker", 2)


def test_local_addresses_refuse_non_loopback():
    with pytest.raises(ValueError, match="loopback only.*Received: host='0.0.0.0'"):
        sources.local_addresses(2, host="0.0.0.0")
    with pytest.raises(ValueError, match="Received: n=0"):
        sources.local_addresses(0)


# ------------------------------------------------------------ hostfile
DEEPSPEED_HOSTFILE = """\
# DeepSpeed / Horovod style hostfile
worker-1 slots=4
worker-2 slots=4   # second box

10.1.0.7 slots=2 max_slots=8
"""


def test_hostfile_deepspeed_style():
    addrs = sources.parse_hostfile(DEEPSPEED_HOSTFILE, port=12345)
    assert addrs == (
        [f"worker-1:{12345 + k}" for k in range(4)]
        + [f"worker-2:{12345 + k}" for k in range(4)]
        + ["10.1.0.7:12345", "10.1.0.7:12346"]
    )
    cfg = tc.build_tf_config({"worker": addrs}, "worker", 9)
    assert cfg["cluster"]["worker"][9] == "10.1.0.7:12346"


def test_hostfile_bare_hosts_and_horovod_short_form(tmp_path):
    path = tmp_path / "hosts"
    path.write_text("node01\nnode02:2\n")
    assert sources.read_hostfile(path) == ["node01:2222", "node02:2222", "node02:2223"]


@pytest.mark.parametrize(
    "text,match",
    [
        ("h1 slots=0\n", r"line 1: `slots` must be a positive int. Received: slots='0'"),
        ("h1 slots=four\n", r"Received: slots='four'"),
        ("h1 slots=2\nh1 slots=2\n", r"line 2: host 'h1' already listed on line 1"),
        ("h1 4\n", r"line 1: expected 'host slots=N'. Received: 'h1 4'"),
        ("# only comments\n\n", "no hosts found"),
    ],
)
def test_hostfile_errors_name_line_and_value(text, match):
    with pytest.raises(ValueError, match=match):
        sources.parse_hostfile(text)


# ------------------------------------------------------------ SLURM
@pytest.mark.parametrize(
    "nodelist,expected",
    [
        ("node01", ["node01"]),
        ("node[01-04,07]", ["node01", "node02", "node03", "node04", "node07"]),
        ("gpu-a[9-11]", ["gpu-a9", "gpu-a10", "gpu-a11"]),
        ("node[001-002],login1,cn[5,7]", ["node001", "node002", "login1", "cn5", "cn7"]),
        ("rack[1-2]-n[01-02]", ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]),
        ("nid[00010-00011].cluster", ["nid00010.cluster", "nid00011.cluster"]),
    ],
)
def test_expand_nodelist(nodelist, expected):
    assert sources.expand_nodelist(nodelist) == expected


@pytest.mark.parametrize(
    "nodelist,match",
    [
        ("node[01-04", "unbalanced brackets"),
        ("node[04-01]", "descending range '04-01'"),
        ("node[a-b]", "bad range 'a-b'"),
        ("node1,,node2", "empty entry"),
        ("", "expected e.g."),
    ],
)
def test_expand_nodelist_errors(nodelist, match):
    with pytest.raises(ValueError, match=match):
        sources.expand_nodelist(nodelist)


def test_tasks_per_node():
    assert sources.expand_tasks_per_node("2(x3),1", 4) == [2, 2, 2, 1]
    with pytest.raises(
        ValueError,
        match=r"describes 2 node\(s\) but the node "
        r"list has 3. Received: SLURM_TASKS_PER_NODE='4\(x2\)'",
    ):
        sources.expand_tasks_per_node("4(x2)", 3)


# What `srun` sets in task 5 of `sbatch -N 3 --ntasks-per-node=2` (trimmed).
SLURM_STEP_ENV = {
    "SLURM_JOB_ID": "4711302",
    "SLURM_JOB_NAME": "train",
    "SLURM_JOB_NODELIST": "gpu-node[017-018,021]",
    "SLURM_NODELIST": "gpu-node[017-018,021]",
    "SLURM_JOB_NUM_NODES": "3",
    "SLURM_NNODES": "3",
    "SLURM_NTASKS": "6",
    "SLURM_NPROCS": "6",
    "SLURM_TASKS_PER_NODE": "2(x3)",
    "SLURM_NTASKS_PER_NODE": "2",
    "SLURM_STEP_ID": "0",
    "SLURM_STEP_NODELIST": "gpu-node[017-018,021]",
    "SLURM_STEP_NUM_NODES": "3",
    "SLURM_STEP_NUM_TASKS": "6",
    "SLURM_STEP_TASKS_PER_NODE": "2(x3)",
    "SLURM_PROCID": "5",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "2",
    "SLURMD_NODENAME": "gpu-node021",
}


def test_slurm_step_environment():
    src = sources.slurm_cluster(SLURM_STEP_ENV, port=23456)
    assert src.addresses == (
        "gpu-node017:23456",
        "gpu-node017:23457",
        "gpu-node018:23456",
        "gpu-node018:23457",
        "gpu-node021:23456",
        "gpu-node021:23457",
    )
    assert src.index == 5
    cfg = tc.build_tf_config({"worker": list(src.addresses)}, "worker", src.index)
    # Task 5 is the second task on its own node (SLURMD_NODENAME, SLURM_LOCALID).
    assert cfg["cluster"]["worker"][5] == "gpu-node021:23457"


def test_slurm_batch_script_environment_uneven_tasks():
    # sbatch -n 5 -N 3 (no srun yet): SLURM_PROCID=0 in the batch step.
    env = {
        "SLURM_JOB_ID": "99",
        "SLURM_JOB_NODELIST": "cn[1-3]",
        "SLURM_NTASKS": "5",
        "SLURM_TASKS_PER_NODE": "2(x2),1",
        "SLURM_PROCID": "0",
    }
    src = sources.slurm_cluster(env)
    assert src.addresses == ("cn1:2222", "cn1:2223", "cn2:2222", "cn2:2223", "cn3:2222")
    assert src.index == 0
    assert sources.in_slurm(env)


def test_slurm_without_tasks_per_node_divides_evenly():
    env = {"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_NTASKS": "4"}
    assert sources.slurm_cluster(env).addresses == ("n1:2222", "n1:2223", "n2:2222", "n2:2223")
    assert sources.slurm_cluster({"SLURM_JOB_NODELIST": "n[1-2]"}).index is None


@pytest.mark.parametrize(
    "env,match",
    [
        ({}, "Not inside a SLURM allocation.*Received: SLURM_JOB_NODELIST=None"),
        (
            {"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_NTASKS": "3"},
            r"3 task\(s\) do not divide evenly over 2 node\(s\)",
        ),
        (
            {"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_NTASKS": "3", "SLURM_TASKS_PER_NODE": "2(x2)"},
            r"SLURM_NTASKS='3' but SLURM_TASKS_PER_NODE gives 4 task\(s\)",
        ),
        (
            {"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_PROCID": "2"},
            r"Invalid SLURM_PROCID: expected an int in \[0, 2\). Received: SLURM_PROCID=2",
        ),
        ({"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_PROCID": "one"}, r"Received: SLURM_PROCID='one'"),
        (
            {"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_TASKS_PER_NODE": "2x2"},
            r"Received: SLURM_TASKS_PER_NODE='2x2'",
        ),
    ],
)
def test_slurm_errors_name_variable_and_value(env, match):
    with pytest.raises(ValueError, match=match):
        sources.slurm_cluster(env)


# ------------------------------------------------------------ Kubernetes
def test_statefulset_addresses_and_ordinal_from_hostname():
    src = sources.statefulset_cluster("trainer.trainer-svc:2222", 3, {"HOSTNAME": "trainer-2"})
    assert src.addresses == (
        "trainer-0.trainer-svc:2222",
        "trainer-1.trainer-svc:2222",
        "trainer-2.trainer-svc:2222",
    )
    assert src.index == 2
    src = sources.statefulset_cluster("trainer.trainer-svc.ml:5000", 2, {"HOSTNAME": "laptop"})
    assert src.addresses[1] == "trainer-1.trainer-svc.ml:5000"
    assert src.index is None


@pytest.mark.parametrize(
    "call,match",
    [
        (
            lambda: sources.parse_statefulset_spec("trainer:2222"),
            "expected 'NAME.SERVICE\\[.NAMESPACE\\]:PORT'.*Received: 'trainer:2222'",
        ),
        (lambda: sources.statefulset_addresses("Trainer", "svc", 2), "Received: name='Trainer'"),
        (lambda: sources.statefulset_addresses("t", "svc", 0), "Received: replicas=0"),
        (
            lambda: sources.statefulset_cluster("t.svc:1", 2, {"HOSTNAME": "t-3"}),
            "ordinal 3 is outside replicas=2",
        ),
        (lambda: sources.statefulset_ordinal("trainer"), "Received: HOSTNAME='trainer'"),
    ],
)
def test_statefulset_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()
