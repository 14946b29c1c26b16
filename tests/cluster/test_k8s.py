"""`tfdist-opt k8s`: TrainJob, RayJob and TFJob manifests, checked against their CRDs.

Nothing here runs on Kubernetes: each manifest is parsed back (PyYAML) and
validated against its CRD's openAPIV3Schema (`crd_schema`, the schemas
kept in `tests/cluster/crds/` with their source release), then checked for
what the schema cannot say: the names Trainer, KubeRay and the Training
Operator look up, restarts, success, placement, volumes.
"""

import json
import re
import shlex
import warnings

import pytest

from tfdist_opt import StrategyConfig
from tfdist_opt import cli
from tfdist_opt.cli import launch as launch_cli
from tfdist_opt.cluster import k8s
from tfdist_opt.cluster import kuberay
from tfdist_opt.cluster import tf_config as tc
from tfdist_opt.cluster import trainjob
from tfdist_opt.strategy.plan import plan_strategy
from tfdist_opt.strategy.topology import Topology
from tests.cluster import crd_schema

yaml = pytest.importorskip("yaml", reason="pyyaml comes with the test extra")

CMD = ["python", "-m", "tfdist_opt.examples.train_cnn", "--epochs", "3"]


def check_shape(doc):
    """Fails on what the API server would reject or prune (the CRD's openAPIV3Schema)."""
    errors = crd_schema.validate(doc)
    assert not errors, "\n".join(errors)


def pods(obj):
    """Every pod spec in a manifest."""
    if isinstance(obj, dict):
        if "containers" in obj:
            yield obj
        for v in obj.values():
            yield from pods(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from pods(v)


def check_pods(doc):
    """Container env names unique; every volumeMount names a volume of its pod."""
    for pod in pods(doc):
        volumes = {v["name"] for v in pod.get("volumes", [])}
        for c in pod["containers"]:
            names = [e["name"] for e in c.get("env", [])]
            assert len(names) == len(set(names)), names
            for m in c.get("volumeMounts", []):
                assert m["name"] in volumes, (m, volumes)


def _cli(capsys, *argv):
    code = cli.main(["k8s", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _docs(out):
    return [d for d in yaml.safe_load_all(out) if d is not None]


# ----------------------------------------------------------------- trainjob
def test_trainjob_writes_a_runtime_and_a_trainjob_of_the_crd_shapes(capsys):
    code, out, err = _cli(
        capsys,
        "--kind",
        "trainjob",
        "--workers",
        "4",
        "--gpus-per-worker",
        "2",
        "--image",
        "reg/t:1",
        "--namespace",
        "ml",
        "--name",
        "resnet",
        "--env",
        "TFDIST_OPT_ALL_REDUCE=ring",
        "--",
        *CMD,
    )
    assert code == 0, err
    runtime, job = _docs(out)
    check_shape(runtime)
    check_shape(job)
    check_pods(runtime)
    assert (runtime["apiVersion"], runtime["kind"]) == (
        "trainer.kubeflow.org/v1alpha1",
        "TrainingRuntime",
    )
    assert (job["apiVersion"], job["kind"]) == ("trainer.kubeflow.org/v1alpha1", "TrainJob")
    # The job's own runtime, in its namespace, named after it.
    assert runtime["metadata"]["name"] == "resnet" and runtime["metadata"]["namespace"] == "ml"
    assert job["metadata"] == {"name": "resnet", "namespace": "ml"}
    assert job["spec"]["runtimeRef"] == {
        "name": "resnet",
        "apiGroup": "trainer.kubeflow.org",
        "kind": "TrainingRuntime",
    }
    trainer = job["spec"]["trainer"]
    assert trainer["numNodes"] == 4 and trainer["command"] == CMD
    assert trainer["image"] == "reg/t:1"
    assert trainer["resourcesPerNode"] == {"limits": {"nvidia.com/gpu": 2}}
    env = {e["name"]: e["value"] for e in trainer["env"]}
    assert env["TFDIST_JOBSET_WORKERS"] == "4" and env["TFDIST_OPT_ALL_REDUCE"] == "ring"
    # Trainer finds the trainer Job and container by these names.
    (rjob,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    assert rjob["name"] == "node"
    assert rjob["template"]["metadata"]["labels"] == {
        "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"
    }
    assert rjob["template"]["spec"]["completionMode"] == "Indexed"
    (c,) = rjob["template"]["spec"]["template"]["spec"]["containers"]
    assert c["name"] == "node"
    fields = {
        e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in c["env"] if "valueFrom" in e
    }
    assert fields == {
        "TFDIST_JOBSET_NAME": "metadata.labels['jobset.sigs.k8s.io/jobset-name']",
        "TFDIST_JOBSET_REPLICATED_JOB": "metadata.labels['jobset.sigs.k8s.io/replicatedjob-name']",
        "TFDIST_JOBSET_JOB_INDEX": "metadata.labels['jobset.sigs.k8s.io/job-index']",
    }
    assert runtime["spec"]["template"]["spec"]["network"]["enableDNSHostnames"] is True
    assert "TF_CONFIG" not in fields and "TF_CONFIG" not in env
    assert "no --kind" not in err


def test_trainjob_restarts_and_backup_volume(capsys):
    code, out, err = _cli(
        capsys,
        "--kind",
        "trainjob",
        "--workers",
        "2",
        "--max-restarts",
        "3",
        "--backup-dir",
        "/backups",
        "--backup-claim",
        "trainer-backups",
        "--image",
        "i",
        "--",
        *CMD,
    )
    assert code == 0 and "warning" not in err, err
    runtime, job = _docs(out)
    check_shape(runtime)
    check_pods(runtime)
    spec = runtime["spec"]["template"]["spec"]
    assert spec["failurePolicy"] == {"maxRestarts": 3}
    pod = spec["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert spec["replicatedJobs"][0]["template"]["spec"]["backoffLimit"] == 0
    assert pod["volumes"] == [
        {"name": "tfdist-opt-backup", "persistentVolumeClaim": {"claimName": "trainer-backups"}}
    ]
    assert pod["containers"][0]["volumeMounts"] == [
        {"name": "tfdist-opt-backup", "mountPath": "/backups"}
    ]
    # emptyDir: written, with a warning that JobSet restarts lose it.
    code, out, err = _cli(
        capsys,
        "--kind",
        "trainjob",
        "--workers",
        "2",
        "--max-restarts",
        "1",
        "--backup-dir",
        "/backups",
        "--image",
        "i",
        "--",
        *CMD,
    )
    assert code == 0 and "warning: backup_dir='/backups' is an emptyDir" in err
    assert "no backup survives a restart" in err
    pod = _docs(out)[0]["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"][
        "template"
    ]["spec"]
    assert pod["volumes"] == [{"name": "tfdist-opt-backup", "emptyDir": {}}]


# ----------------------------------------------------------------- rayjob
@pytest.mark.parametrize("gpus", [0, 2])
def test_rayjob_runs_the_launcher_on_a_cluster_of_the_crd_shape(capsys, gpus):
    code, out, err = _cli(
        capsys,
        "--kind",
        "rayjob",
        "--workers",
        "3",
        "--gpus-per-worker",
        str(gpus),
        "--max-restarts",
        "2",
        "--backup-dir",
        "/ckpt",
        "--backup-claim",
        "shared",
        "--image",
        "reg/t:1",
        "--",
        *CMD,
    )
    assert code == 0, err
    (job,) = _docs(out)
    check_shape(job)
    check_pods(job)
    assert (job["apiVersion"], job["kind"]) == ("ray.io/v1", "RayJob")
    cluster = job["spec"]["rayClusterSpec"]
    (group,) = cluster["workerGroupSpecs"]
    assert group["replicas"] == group["minReplicas"] == group["maxReplicas"] == 3
    assert cluster["headGroupSpec"]["rayStartParams"] == {"num-cpus": "0"}
    (head,) = cluster["headGroupSpec"]["template"]["spec"]["containers"]
    (worker,) = group["template"]["spec"]["containers"]
    assert head["resources"] == {
        "requests": {"cpu": "1", "memory": "2Gi"},
        "limits": {"cpu": "1", "memory": "5Gi"},
    }
    pod = {"cpu": "1", "memory": "4Gi"}
    if gpus:
        assert worker["resources"] == {
            "requests": pod,
            "limits": {**pod, "nvidia.com/gpu": gpus},
        }
    else:
        assert worker["resources"] == {"requests": pod, "limits": pod}
    for c in (head, worker):
        assert c["image"] == "reg/t:1"
        assert c["volumeMounts"] == [{"name": "tfdist-opt-backup", "mountPath": "/ckpt"}]
    # The entrypoint is a `tfdist-opt launch` line the launcher accepts.
    argv = shlex.split(job["spec"]["entrypoint"])
    assert argv[:2] == ["tfdist-opt", "launch"]
    options, command = launch_cli.split_command(argv[2:])
    assert command == CMD
    parser = launch_cli.build_parser()
    if gpus and "--gpus-per-worker" not in parser.format_help():
        pytest.skip("this tree's `tfdist-opt launch` has no --gpus-per-worker yet")
    args = parser.parse_args(options)
    assert args.ray == "auto" and args.num_workers == 3
    assert args.max_restarts == 2 and args.ray_storage == "/ckpt"
    if gpus:
        assert args.gpus_per_worker == gpus


def test_rayjob_refuses_what_ray_cannot_run(capsys):
    for argv, match in [
        (["--", "./train.sh"], r"`command` with kind rayjob.*Received: ./train.sh"),
        (["--backup-dir", "/b", "--", *CMD], r"`backup_claim` with kind rayjob.*emptyDir"),
        (["--ray-version", "latest", "--", *CMD], r"`ray_version`.*Received: ray_version='latest'"),
        (["--port", "2300", "--", *CMD], r"`--port` applies to --kind tfjob or trainjob"),
    ]:
        code, out, err = _cli(capsys, "--kind", "rayjob", "--workers", "2", "--image", "i", *argv)
        assert code == 2 and out == "", err
        assert re.search(match, err), err


# ----------------------------------------------------------------- tfjob
def test_no_kind_still_writes_todays_tfjob_with_a_note(capsys):
    code, out, err = _cli(
        capsys,
        "--workers",
        "4",
        "--image",
        "reg/trainer:1.0",
        "--env",
        "TFDIST_OPT_ALL_REDUCE=ring",
        "--",
        *CMD,
    )
    assert code == 0, err
    assert "note: no --kind: writing a TFJob" in err and "--kind trainjob" in err
    (job,) = _docs(out)
    check_shape(job)
    assert job == k8s.build_tfjob(
        "trainer", "reg/trainer:1.0", CMD, 4, env={"TFDIST_OPT_ALL_REDUCE": "ring"}
    )
    code, out2, err = _cli(
        capsys,
        "--kind",
        "tfjob",
        "--workers",
        "4",
        "--image",
        "reg/trainer:1.0",
        "--env",
        "TFDIST_OPT_ALL_REDUCE=ring",
        "--",
        *CMD,
    )
    assert code == 0 and out2 == out and "note" not in err
    assert job["apiVersion"] == "kubeflow.org/v1" and job["kind"] == "TFJob"
    assert list(job["spec"]["tfReplicaSpecs"]) == ["Worker"]
    worker = job["spec"]["tfReplicaSpecs"]["Worker"]
    assert worker["replicas"] == 4 and worker["restartPolicy"] == "Never"
    (c,) = worker["template"]["spec"]["containers"]
    # The operator finds the port on the container named `tensorflow`, port
    # named `tfjob-port`; it sets TF_CONFIG itself, so the manifest has none.
    assert c["name"] == "tensorflow" and c["command"] == CMD
    assert c["ports"] == [{"name": "tfjob-port", "containerPort": 2222}]
    assert {"name": "TFDIST_OPT_ALL_REDUCE", "value": "ring"} in c["env"]
    assert "TF_CONFIG" not in {e["name"] for e in c["env"]}
    assert "resources" not in c and "volumes" not in worker["template"]["spec"]


def test_tfjob_ps_gpus_restarts_backups_namespace_and_port(capsys, tmp_path):
    path = tmp_path / "job.yaml"
    code, _, err = _cli(
        capsys,
        "--kind",
        "tfjob",
        "--workers",
        "2",
        "--ps",
        "1",
        "--gpus",
        "8",
        "--max-restarts",
        "3",
        "--namespace",
        "ml",
        "--name",
        "big",
        "--port",
        "2300",
        "--backup-dir",
        "/backups",
        "--image",
        "i:1",
        "-o",
        str(path),
        "--",
        *CMD,
    )
    assert code == 0 and f"wrote {path}" in err
    assert "warning: backup_dir='/backups' is an emptyDir" in err
    assert "survives the in-place container restarts" in err
    (job,) = _docs(path.read_text())
    check_shape(job)
    check_pods(job)
    specs = job["spec"]["tfReplicaSpecs"]
    assert {k: v["replicas"] for k, v in specs.items()} == {"Chief": 1, "PS": 1, "Worker": 2}
    assert {v["restartPolicy"] for v in specs.values()} == {"OnFailure"}
    # The operator fails the job once container restarts summed over its
    # pods reach backoffLimit: 3 restarts of all 4 replicas need 3 * 4 + 1.
    assert job["spec"]["runPolicy"]["backoffLimit"] == 13
    assert job["metadata"] == {"name": "big", "namespace": "ml"}

    def container(role):
        (c,) = specs[role]["template"]["spec"]["containers"]
        return c

    assert container("Worker")["resources"] == {"limits": {"nvidia.com/gpu": 8}}
    assert container("Chief")["resources"] == {"limits": {"nvidia.com/gpu": 8}}
    assert "resources" not in container("PS")
    assert container("PS")["ports"][0]["containerPort"] == 2300
    for role, spec in specs.items():
        assert spec["template"]["spec"]["volumes"] == [
            {"name": "tfdist-opt-backup", "emptyDir": {}}
        ], role
        assert container(role)["volumeMounts"] == [
            {"name": "tfdist-opt-backup", "mountPath": "/backups"}
        ]


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
    assert cfg == {
        "cluster": {
            "chief": ["t-chief-0.default.svc.cluster.local:2222"],
            "ps": ["t-ps-0.default.svc.cluster.local:2222"],
            "worker": [
                "t-worker-0.default.svc.cluster.local:2222",
                "t-worker-1.default.svc.cluster.local:2222",
            ],
        },
        "task": {"type": "ps", "index": 0},
        "environment": "cloud",
    }
    src = k8s.tfjob_cluster({"TF_CONFIG": json.dumps(cfg)})
    assert src.index is None and len(src.addresses) == 2
    assert k8s.operator_tf_config(k8s.build_tfjob("t", "i", CMD, 1), "Worker", 0) is None


def test_tfjob_source_rejects_what_the_operator_would_not_write():
    with pytest.raises(ValueError, match="TF_CONFIG is not set"):
        k8s.tfjob_cluster({})
    cfg = tc.build_tf_config({"worker": ["h1:2222", "h2:2222"]}, "worker", 0)
    with pytest.raises(
        ValueError,
        match=r"cluster.worker address 'h1:2222' is not a "
        r"TFJob Service name",
    ):
        k8s.tfjob_cluster({"TF_CONFIG": json.dumps(cfg)})


def test_tfjob_backup_claim_mounts_the_claim_without_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        job = k8s.build_tfjob(
            "t", "i", CMD, 2, max_restarts=1, backup_dir="/b", backup_claim="pvc-1"
        )
    spec = job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]
    assert spec["volumes"] == [
        {"name": "tfdist-opt-backup", "persistentVolumeClaim": {"claimName": "pvc-1"}}
    ]
    assert job["spec"]["runPolicy"]["backoffLimit"] == 3


# ----------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "argv,match",
    [
        (
            ["--workers", "0", "--image", "i", "--", "x"],
            r"`--workers`: expected an int >= 1. Received: --workers='0'",
        ),
        (
            ["--kind", "trainjob", "--workers", "two", "--image", "i", "--", "x"],
            r"`--workers`: expected an int >= 1. Received: --workers='two'",
        ),
        (
            [
                "--kind",
                "trainjob",
                "--workers",
                "2",
                "--gpus-per-worker",
                "1.5",
                "--image",
                "i",
                "--",
                "x",
            ],
            r"`--gpus-per-worker`: expected an int >= 0. Received: --gpus-per-worker='1.5'",
        ),
        (
            [
                "--kind",
                "rayjob",
                "--workers",
                "2",
                "--gpus-per-worker",
                "-1",
                "--image",
                "i",
                "--",
                "python",
                "t.py",
            ],
            r"`--gpus-per-worker`: expected an int >= 0. Received: --gpus-per-worker='-1'",
        ),
        (
            ["--kind", "jaxjob", "--workers", "2", "--image", "i", "--", "x"],
            r"Unrecognized `--kind`: expected one of tfjob, trainjob, rayjob. Received: --kind='jaxjob'",
        ),
        (
            ["--workers", "2", "--image", "i", "--name", "Bad_Name", "--", "x"],
            r"`name`: expected a DNS label.*Received: name='Bad_Name'",
        ),
        (["--workers", "2", "--image", "a b", "--", "x"], r"`image`.*Received: image='a b'"),
        (
            ["--workers", "2", "--image", "i", "--env", "NOEQUALS", "--", "x"],
            r"`--env`: expected NAME=VALUE with a shell-style NAME. Received: --env 'NOEQUALS'",
        ),
        (
            ["--kind", "trainjob", "--workers", "2", "--image", "i", "--env", "1X=y", "--", "x"],
            r"`--env`: expected NAME=VALUE.*Received: --env '1X=y'",
        ),
        (
            [
                "--kind",
                "trainjob",
                "--workers",
                "2",
                "--image",
                "i",
                "--env",
                "TFDIST_JOBSET_WORKERS=9",
                "--",
                "x",
            ],
            r"`env`: TFDIST_JOBSET_WORKERS is set by the TensorFlow runtime.*"
            r"Received: TFDIST_JOBSET_WORKERS='9'",
        ),
        *[
            (
                [
                    "--kind",
                    "trainjob",
                    "--workers",
                    "2",
                    "--image",
                    "i",
                    "--env",
                    f"{k}=1",
                    "--",
                    "x",
                ],
                rf"`env`: {k} is set by the TensorFlow runtime.*Received: {k}='1'",
            )
            for k in (
                "TFDIST_JOBSET_PORT",
                "TFDIST_JOBSET_NAME",
                "JOB_COMPLETION_INDEX",
                "TF_CONFIG",
            )
        ],
        (
            ["--kind", "rayjob", "--workers", "2", "--image", "i", "--cpus-per-worker", "0.5"]
            + ["--", "python", "t.py"],
            r"`--cpus-per-worker`: expected an int >= 1. Received: --cpus-per-worker='0.5'",
        ),
        (
            ["--kind", "rayjob", "--workers", "2", "--image", "i", "--memory-per-worker", "4GB"]
            + ["--", "python", "t.py"],
            r"`memory`: expected a Kubernetes memory quantity.*Received: memory='4GB'",
        ),
        (
            ["--kind", "tfjob", "--workers", "2", "--image", "i", "--cpus-per-worker", "2"]
            + ["--", "x"],
            r"`--cpus-per-worker` applies to --kind rayjob",
        ),
        (
            ["--workers", "2", "--image", "i", "--port", "70000", "--", "x"],
            r"`port`.*Received: port=70000",
        ),
        (
            ["--workers", "2", "--image", "i", "--backup-dir", "backups", "--", "x"],
            r"`backup_dir`: expected an absolute path.*Received: backup_dir='backups'",
        ),
        (
            ["--workers", "2", "--image", "i", "--backup-claim", "pvc", "--", "x"],
            r"`backup_claim`.*set backup_dir too",
        ),
        (
            ["--kind", "trainjob", "--workers", "2", "--ps", "1", "--image", "i", "--", "x"],
            r"`--ps` applies to --kind tfjob. Received: --ps='1' with --kind trainjob",
        ),
        (
            ["--kind", "tfjob", "--workers", "2", "--runtime", "rt", "--image", "i", "--", "x"],
            r"`--runtime` applies to --kind trainjob",
        ),
        (["--workers", "2", "--image", "i"], r"nothing to run"),
    ],
)
def test_bad_input_is_an_error_naming_the_field(capsys, argv, match):
    code, out, err = _cli(capsys, *argv)
    assert code == 2 and out == ""
    assert re.search(match, err), err


def test_help_says_opt_strategy_builds_ps_strategies(capsys):
    code, out, _ = _cli(capsys, "--help")
    out = " ".join(out.split())
    assert code == 0 and "does not build" not in out
    assert "opt_strategy() builds the parameter-server strategy" in out
    for kind in ("trainjob", "rayjob", "tfjob"):
        assert f"--kind {kind}" in out


def test_yaml_writer_quotes_strings_and_handles_nesting():
    obj = {
        "a": "yes",
        "b": "2222",
        "c": ["x", {"k": 1, "l": [True, None]}],
        "d": {},
        "e": [],
        "on": 'say "hi"\n',
        "f": [["p", "q"]],
        "metadata.labels['x/y']": "z",
    }
    assert yaml.safe_load(k8s.to_yaml(obj)) == obj


def test_builders_validate_without_the_cli():
    with pytest.raises(ValueError, match=r"`workers`: expected an int >= 1. Received: workers=0"):
        trainjob.build_trainjob("t", "i", CMD, 0)
    with pytest.raises(ValueError, match=r"`gpus`: expected an int >= 0. Received: gpus=1.5"):
        kuberay.build_rayjob("t", "i", ["python", "t.py"], 2, gpus=1.5)
    with pytest.raises(ValueError, match=r"`name`: expected a DNS label"):
        trainjob.build_trainjob("x" * 60, "i", CMD, 2)  # NAME-node-0-I must fit 63
    kuberay.build_rayjob("r" * 47, "i", ["python", "t.py"], 1)
    with pytest.raises(ValueError, match=r"at most 47 characters.*Received: name='r{48}'"):
        kuberay.build_rayjob("r" * 48, "i", ["python", "t.py"], 1)  # KubeRay's limit
    with pytest.raises(ValueError, match=r"`command`.*Received: command='python t.py'"):
        k8s.build_tfjob("t", "i", "python t.py", 2)
