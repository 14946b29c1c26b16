"""TF_CONFIG built in a JobSet pod (Kubeflow Trainer v2) from its index. Pure, no TF."""

import json

import pytest

from tfdist_opt import StrategyConfig
from tfdist_opt.cluster import jobset
from tfdist_opt.cluster import tf_config as tc
from tfdist_opt.cluster import trainjob
from tfdist_opt.strategy import topology as topology_lib
from tfdist_opt.strategy.plan import plan_strategy

CMD = ["python", "train.py"]


def _pod_env(index, workers=3, **extra):
    """What a pod of the runtime `tfdist-opt k8s --kind trainjob` writes sees."""
    env = {
        "TFDIST_JOBSET_WORKERS": str(workers),
        "JOB_COMPLETION_INDEX": str(index),
        "TFDIST_JOBSET_NAME": "mnist",
        "TFDIST_JOBSET_REPLICATED_JOB": "node",
        "TFDIST_JOBSET_JOB_INDEX": "0",
        "TFDIST_JOBSET_PORT": "2222",
    }
    env.update(extra)
    return env


def test_every_pod_gets_the_jobset_hostnames_and_its_index():
    hosts = [f"mnist-node-0-{i}.mnist:2222" for i in range(3)]
    for i in range(3):
        cfg = jobset.tf_config_from_jobset(_pod_env(i))
        assert cfg == {"cluster": {"worker": hosts}, "task": {"type": "worker", "index": i}}
        assert tc.validate_tf_config(cfg, warn=False) == []
        topo = topology_lib.Topology(tf_config=cfg)
        assert topo.num_workers == 3 and topo.is_chief == (i == 0)
        kind = plan_strategy(StrategyConfig(), topo).kind
        assert getattr(kind, "value", kind) == "multi_worker"


def test_subdomain_port_and_job_index_are_used():
    cfg = jobset.tf_config_from_jobset(
        _pod_env(
            1,
            workers=2,
            TFDIST_JOBSET_SUBDOMAIN="net.ml.svc.cluster.local",
            TFDIST_JOBSET_PORT="2300",
            TFDIST_JOBSET_JOB_INDEX="4",
        )
    )
    assert cfg["cluster"]["worker"] == [
        "mnist-node-4-0.net.ml.svc.cluster.local:2300",
        "mnist-node-4-1.net.ml.svc.cluster.local:2300",
    ]
    # Optional variables left out: subdomain = the JobSet's name, job 0, port 2222.
    env = _pod_env(0, workers=2)
    for key in ("TFDIST_JOBSET_JOB_INDEX", "TFDIST_JOBSET_PORT"):
        del env[key]
    assert jobset.tf_config_from_jobset(env)["cluster"]["worker"][1] == "mnist-node-0-1.mnist:2222"


def test_not_a_jobset_pod_or_one_worker_gives_none():
    assert jobset.tf_config_from_jobset({}) is None
    assert jobset.tf_config_from_jobset({"JOB_COMPLETION_INDEX": "0"}) is None
    assert jobset.tf_config_from_jobset(_pod_env(0, workers=1)) is None


@pytest.mark.parametrize(
    "change,match",
    [
        (
            {"JOB_COMPLETION_INDEX": None},
            r"`JOB_COMPLETION_INDEX` expected an int >= 0. Received: JOB_COMPLETION_INDEX=None",
        ),
        (
            {"JOB_COMPLETION_INDEX": "3"},
            r"`JOB_COMPLETION_INDEX` expected an index below TFDIST_JOBSET_WORKERS=3.*Received: JOB_COMPLETION_INDEX='3'",
        ),
        (
            {"TFDIST_JOBSET_WORKERS": "two"},
            r"`TFDIST_JOBSET_WORKERS` expected an int >= 1. Received: TFDIST_JOBSET_WORKERS='two'",
        ),
        (
            {"TFDIST_JOBSET_NAME": None},
            r"`TFDIST_JOBSET_NAME` expected a DNS name.*Received: TFDIST_JOBSET_NAME=None",
        ),
        (
            {"TFDIST_JOBSET_REPLICATED_JOB": "Node_1"},
            r"`TFDIST_JOBSET_REPLICATED_JOB`.*Received: TFDIST_JOBSET_REPLICATED_JOB='Node_1'",
        ),
        (
            {"TFDIST_JOBSET_PORT": "70000"},
            r"`TFDIST_JOBSET_PORT` expected a port in 1..65535. Received: TFDIST_JOBSET_PORT=70000",
        ),
    ],
)
def test_bad_pod_environment_is_a_named_error(change, match):
    env = _pod_env(1)
    for key, value in change.items():
        if value is None:
            env.pop(key)
        else:
            env[key] = value
    with pytest.raises(ValueError, match=match):
        jobset.tf_config_from_jobset(env)


def test_apply_writes_tf_config_once_and_never_over_one_already_set():
    env = _pod_env(2)
    cfg = jobset.apply_jobset_tf_config(env)
    assert json.loads(env["TF_CONFIG"]) == cfg and cfg["task"]["index"] == 2
    assert jobset.apply_jobset_tf_config(env) is None  # already set: untouched
    other = tc.build_tf_config({"worker": ["a:1", "b:1"]}, "worker", 1)
    env = dict(_pod_env(0), TF_CONFIG=json.dumps(other))
    assert jobset.apply_jobset_tf_config(env) is None
    assert json.loads(env["TF_CONFIG"]) == other
    env = {"PATH": "/bin"}
    assert jobset.apply_jobset_tf_config(env) is None and env == {"PATH": "/bin"}


def test_opt_strategy_topology_reads_a_jobset_pod_without_tf_config():
    # detect_topology is where opt_strategy() resolves TF_CONFIG: a JobSet pod
    # of the trainjob runtime has none, and must still be worker 1 of 3.
    env = _pod_env(1)
    topo = topology_lib.detect_topology(env, gpus=())
    assert topo.num_workers == 3 and topo.task_index == 1 and not topo.is_chief
    assert json.loads(env["TF_CONFIG"])["cluster"]["worker"][0] == "mnist-node-0-0.mnist:2222"


def test_what_the_written_runtime_gives_each_pod_builds_its_tf_config():
    job = trainjob.build_trainjob("resnet", "reg/t:1", CMD, 4, namespace="ml")
    runtime = trainjob.build_tf_runtime("reg/t:1", "resnet", namespace="ml", port=2400)
    for i in range(4):
        env = trainjob.pod_environment(job, runtime, i)
        cfg = jobset.tf_config_from_jobset(env)
        # Trainer names the JobSet after the TrainJob; one Job (index 0) of
        # numNodes pods in the replicated job `node`; subdomain = JobSet name.
        assert cfg["cluster"]["worker"] == [f"resnet-node-0-{k}.resnet:2400" for k in range(4)]
        assert cfg["task"] == {"type": "worker", "index": i}


def _without_count(job):
    """The TrainJob as the Kubeflow SDK or hand-written YAML gives it: numNodes, no count."""
    trainer = job["spec"]["trainer"]
    trainer["env"] = [e for e in trainer["env"] if e["name"] != jobset.WORKERS_ENV]
    return job


def test_a_trainjob_without_the_count_is_an_error_not_lone_workers():
    job = _without_count(trainjob.build_trainjob("resnet", "reg/t:1", CMD, 4))
    runtime = trainjob.build_tf_runtime("reg/t:1", "resnet")
    for i in range(4):
        env = trainjob.pod_environment(job, runtime, i)
        with pytest.raises(
            ValueError,
            match=r"`TFDIST_JOBSET_WORKERS` is not set, but this pod has the TensorFlow "
            r"runtime's variables \(TFDIST_JOBSET_JOB_INDEX, TFDIST_JOBSET_NAME, .*"
            r"every pod would train alone.*trainer.numNodes.*"
            r"Received: TFDIST_JOBSET_WORKERS=None",
        ):
            jobset.tf_config_from_jobset(env)
        # Where opt_strategy() resolves TF_CONFIG: the same error, no TF_CONFIG written.
        with pytest.raises(ValueError, match=r"`TFDIST_JOBSET_WORKERS` is not set"):
            topology_lib.detect_topology(env, gpus=())
        assert "TF_CONFIG" not in env


def test_any_one_runtime_variable_without_the_count_is_the_error():
    for key in ("TFDIST_JOBSET_NAME", "TFDIST_JOBSET_PORT", "TFDIST_JOBSET_SUBDOMAIN"):
        env = {"JOB_COMPLETION_INDEX": "0", key: "x"}
        with pytest.raises(ValueError, match=rf"variables \({key}\)"):
            jobset.tf_config_from_jobset(env)
