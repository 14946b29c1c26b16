"""`tfdist-opt k8s`: a TFJob manifest whose pods' TF_CONFIG tfdist_opt reads."""

import json
import re

import pytest

from tfdist_opt import StrategyConfig
from tfdist_opt import cli
from tfdist_opt.cluster import k8s
from tfdist_opt.cluster import tf_config as tc
from tfdist_opt.strategy.plan import plan_strategy
from tfdist_opt.strategy.topology import Topology

yaml = pytest.importorskip("yaml", reason="pyyaml comes with the test extra")

CMD = ["python", "-m", "tfdist_opt.examples.train_cnn", "--epochs", "3"]


def _cli(capsys, *argv):
    code = cli.main(["k8s", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _container(job, role):
    (c,) = job["spec"]["tfReplicaSpecs"][role]["template"]["spec"]["containers"]
    return c


def test_cli_prints_a_tfjob_that_yaml_reads_back(capsys):
    code, out, err = _cli(capsys, "--workers", "4", "--image", "reg/trainer:1.0",
                          "--env", "TFDIST_OPT_ALL_REDUCE=ring", "--", *CMD)
    assert code == 0, err
    job = yaml.safe_load(out)
    assert job == k8s.build_tfjob("trainer", "reg/trainer:1.0", CMD, 4,
                                  env={"TFDIST_OPT_ALL_REDUCE": "ring"})
    assert job["apiVersion"] == "kubeflow.org/v1" and job["kind"] == "TFJob"
    assert job["metadata"] == {"name": "trainer"}
    assert list(job["spec"]["tfReplicaSpecs"]) == ["Worker"]
    worker = job["spec"]["tfReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 4 and worker["restartPolicy"] == "Never"
    c = _container(job, "Worker")
    # The operator finds the port on the container named `tensorflow`, port
    # named `tfjob-port`; it sets TF_CONFIG itself, so the manifest has none.
    assert c["name"] == "tensorflow" and c["image"] == "reg/trainer:1.0"
    assert c["command"] == CMD
    assert c["ports"] == [{"name": "tfjob-port", "containerPort": 2222}]
    assert {"name": "TFDIST_OPT_ALL_REDUCE", "value": "ring"} in c["env"]
    assert "TF_CONFIG" not in {e["name"] for e in c["env"]}
    assert "resources" not in c


def test_ps_gpus_restarts_namespace_and_port(capsys, tmp_path):
    path = tmp_path / "job.yaml"
    code, _, err = _cli(capsys, "--workers", "2", "--ps", "1", "--gpus", "8",
                        "--max-restarts", "3", "--namespace", "ml", "--name", "big",
                        "--port", "2300", "--image", "i:1", "-o", str(path), "--", *CMD)
    assert code == 0 and f"wrote {path}" in err
    job = yaml.safe_load(path.read_text())
    specs = job["spec"]["tfReplicaSpecs"]
    assert {k: v["replicas"] for k, v in specs.items()} == {"Chief": 1, "PS": 1, "Worker": 2}
    assert {v["restartPolicy"] for v in specs.values()} == {"OnFailure"}
    assert job["spec"]["runPolicy"]["backoffLimit"] == 3
    assert job["metadata"] == {"name": "big", "namespace": "ml"}
    assert _container(job, "Worker")["resources"] == {"limits": {"nvidia.com/gpu": 8}}
    assert "resources" not in _container(job, "PS")
    assert _container(job, "PS")["ports"][0]["containerPort"] == 2300


@pytest.mark.parametrize("argv,match", [
    (["--workers", "0", "--image", "i", "--", "x"], r"`workers`: expected an int >= 1. Received: workers=0"),
    (["--workers", "2", "--image", "i", "--name", "Bad_Name", "--", "x"], r"`name`: expected a DNS label.*Received: name='Bad_Name'"),
    (["--workers", "2", "--image", "a b", "--", "x"], r"`image`.*Received: image='a b'"),
    (["--workers", "2", "--image", "i", "--env", "NOEQUALS", "--", "x"], r"`--env`: expected NAME=VALUE. Received: --env 'NOEQUALS'"),
    (["--workers", "2", "--image", "i", "--port", "70000", "--", "x"], r"`port`.*Received: port=70000"),
    (["--workers", "2", "--image", "i"], r"nothing to run"),
])
def test_bad_input_is_an_error_naming_the_field(capsys, argv, match):
    code, out, err = _cli(capsys, *argv)
    assert code == 2 and out == ""
    assert re.search(match, err), err


def test_every_pod_gets_a_tf_config_tfdist_opt_reads_as_multi_worker():
    job = k8s.build_tfjob("trainer", "i", CMD, 3, namespace="ml")
    for i in range(3):
        cfg = k8s.operator_tf_config(job, "Worker", i)
        env = {"TF_CONFIG": json.dumps(cfg)}
        # Valid as TensorFlow would use it, and no warnings (private names).
        assert tc.validate_tf_config(cfg, warn=False) == []
        src = k8s.tfjob_cluster(env)
        assert src.addresses == tuple(f"trainer-worker-{k}.ml.svc:2222" for k in range(3))
        assert src.index == i
        assert "Kubeflow TFJob trainer (namespace ml)" in src.description
        topo = Topology(tf_config=tc.tf_config_from_env(env))
        assert topo.num_workers == 3 and topo.is_chief == (i == 0)
        kind = plan_strategy(StrategyConfig(), topo).kind
        assert getattr(kind, "value", kind) == "multi_worker"


def test_operator_details_custom_domain_one_replica_and_ps():
    job = k8s.build_tfjob("t", "i", CMD, 2, ps=1)
    cfg = k8s.operator_tf_config(job, "PS", 0, cluster_domain="cluster.local")
    assert cfg == {"cluster": {"chief": ["t-chief-0.default.svc.cluster.local:2222"],
                               "ps": ["t-ps-0.default.svc.cluster.local:2222"],
                               "worker": ["t-worker-0.default.svc.cluster.local:2222",
                                          "t-worker-1.default.svc.cluster.local:2222"]},
                   "task": {"type": "ps", "index": 0}, "environment": "cloud"}
    src = k8s.tfjob_cluster({"TF_CONFIG": json.dumps(cfg)})
    assert src.index is None and len(src.addresses) == 2
    assert k8s.operator_tf_config(k8s.build_tfjob("t", "i", CMD, 1), "Worker", 0) is None


def test_tfjob_source_rejects_what_the_operator_would_not_write():
    with pytest.raises(ValueError, match="TF_CONFIG is not set"):
        k8s.tfjob_cluster({})
    cfg = tc.build_tf_config({"worker": ["h1:2222", "h2:2222"]}, "worker", 0)
    with pytest.raises(ValueError, match=r"cluster.worker address 'h1:2222' is not a "
                       r"TFJob Service name"):
        k8s.tfjob_cluster({"TF_CONFIG": json.dumps(cfg)})


def test_yaml_writer_quotes_strings_and_handles_nesting():
    obj = {"a": "yes", "b": "2222", "c": ["x", {"k": 1, "l": [True, None]}],
           "d": {}, "e": [], "on": 'say "hi"\n', "f": [["p", "q"]]}
    assert yaml.safe_load(k8s.to_yaml(obj)) == obj
