"""Every manifest `tfdist-opt k8s` writes, validated against its CRD's openAPIV3Schema.

The schemas are test data (`tests/cluster/crds/`, each naming its source
release and commit); `crd_schema` reports what the API server would reject
or prune. Also here: the semantic checks the schema cannot make, applied
through a fake API server (immutable fields, one job beside another), and
Ray's placement of Ray Train workers on the RayJob's pods.
"""

import re

import pytest

from tests.cluster import crd_schema
from tfdist_opt import cli
from tfdist_opt.cluster import k8s
from tfdist_opt.cluster import kuberay
from tfdist_opt.cluster import trainjob
from tfdist_opt.launch import ray_resources

yaml = pytest.importorskip("yaml", reason="pyyaml comes with the test extra")

CMD = ["python", "-m", "tfdist_opt.examples.train_cnn", "--epochs", "3"]
KINDS = {
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"): "kubeflow/trainer v2.3.0",
    ("trainer.kubeflow.org/v1alpha1", "TrainingRuntime"): "kubeflow/trainer v2.3.0",
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): "kubernetes-sigs/jobset v0.12.0",
    ("ray.io/v1", "RayJob"): "ray-project/kuberay v1.7.0",
    ("kubeflow.org/v1", "TFJob"): "kubeflow/trainer v1.9.4",  # training-operator 1.9
}


def _docs(capsys, *argv):
    code = cli.main(["k8s", *argv, "--", *CMD])
    out, err = capsys.readouterr()
    assert code == 0, err
    return [d for d in yaml.safe_load_all(out) if d is not None]


def test_each_crd_is_kept_with_its_source_release():
    table = crd_schema.crds()
    for key, release in KINDS.items():
        assert key in table, key
        source = table[key]["source"]
        assert re.fullmatch(
            rf"github\.com/{re.escape(release)} \([0-9a-f]{{40}}\) \S+\.yaml", source
        )


ARGV = {
    "trainjob": [
        [],
        ["--workers", "4", "--gpus-per-worker", "2", "--namespace", "ml", "--name", "resnet"],
        ["--max-restarts", "3", "--backup-dir", "/b", "--backup-claim", "pvc", "--port", "2300"],
        ["--max-restarts", "1", "--backup-dir", "/b", "--env", "A=1", "--runtime", "rt"],
    ],
    "rayjob": [
        [],
        ["--gpus-per-worker", "1", "--cpus-per-worker", "8", "--memory-per-worker", "32Gi"],
        ["--max-restarts", "2", "--backup-dir", "/c", "--backup-claim", "pvc", "--namespace", "ml"],
    ],
    "tfjob": [
        [],
        ["--ps", "2", "--gpus-per-worker", "8", "--max-restarts", "3", "--backup-dir", "/b"],
        ["--max-restarts", "1", "--backup-dir", "/b", "--backup-claim", "pvc", "--port", "2300"],
    ],
}


@pytest.mark.parametrize(
    "kind,argv", [(kind, argv) for kind, argvs in ARGV.items() for argv in argvs]
)
def test_every_document_validates_against_its_crd(capsys, kind, argv):
    docs = _docs(capsys, "--kind", kind, "--workers", "2", "--image", "reg/t:1", *argv)
    assert docs
    for doc in docs:
        errors = crd_schema.validate(doc)
        assert not errors, "\n".join(errors)
        # Nothing cluster-scoped: a namespace user can apply it all.
        assert crd_schema.crds()[(doc["apiVersion"], doc["kind"])]["scope"] == "Namespaced"


def test_the_runtime_template_is_a_valid_jobset_spec():
    runtime = trainjob.build_tf_runtime(
        "i", "t", max_restarts=2, backup_dir="/b", backup_claim="pvc"
    )
    jobset_crd = crd_schema.crds()[("jobset.x-k8s.io/v1alpha2", "JobSet")]
    errors = []
    crd_schema.check(
        runtime["spec"]["template"]["spec"],
        jobset_crd["openAPIV3Schema"]["properties"]["spec"],
        "$.spec.template.spec",
        errors,
    )
    assert errors == []


def _tfjob():
    return k8s.build_tfjob("t", "i", CMD, 2)


def _container(job):
    return job["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize(
    "edit,match",
    [
        (lambda j: _container(j).update(bogus=1), r"containers\[0\]\.bogus: unknown field.*prune"),
        (lambda j: j["spec"]["runPolicy"].update(cleanPodPolicies="All"), r"unknown field"),
        (lambda j: j["spec"]["tfReplicaSpecs"]["Worker"].update(replicas="2"), r"expected integer"),
        (
            lambda j: j["spec"]["tfReplicaSpecs"]["Worker"].update(replicas=True),
            r"expected integer",
        ),
        (lambda j: j["spec"]["tfReplicaSpecs"]["Worker"].update(replicas=2**31), r"outside"),
        (lambda j: _container(j)["env"].append(dict(_container(j)["env"][0])), r"duplicate"),
        (lambda j: _container(j).pop("name"), r"containers\[0\]\.name: required"),
        (lambda j: j["metadata"].update(namespace="Bad_NS"), r"namespace: not a DNS label"),
    ],
)
def test_the_validator_finds_what_the_api_server_would_reject_or_prune(edit, match):
    job = _tfjob()
    assert crd_schema.validate(job) == []
    edit(job)
    errors = crd_schema.validate(job)
    assert any(re.search(match, e) for e in errors), errors


def test_the_validator_checks_enums_and_scope():
    runtime = trainjob.build_tf_runtime("i", "t", max_restarts=1)
    runtime["spec"]["template"]["spec"]["failurePolicy"]["restartStrategy"] = "Sometimes"
    errors = crd_schema.validate(runtime)
    assert any("'Sometimes' is not one of" in e for e in errors), errors
    cluster_runtime = trainjob.build_tf_runtime("i", "t", namespace="ml")
    cluster_runtime["kind"] = "ClusterTrainingRuntime"
    assert crd_schema.validate(cluster_runtime) == [
        "$.metadata.namespace: set on a cluster-scoped kind"
    ]


# ------------------------------------------------- TrainJob: one runtime per job
def _trainjob(capsys, name, *argv):
    return _docs(capsys, "--kind", "trainjob", "--name", name, "--image", "i", *argv)


def test_a_second_trainjob_changes_nothing_the_first_one_uses(capsys):
    server = crd_schema.FakeApiServer()
    first = _trainjob(
        capsys,
        "a",
        "--workers",
        "2",
        "--max-restarts",
        "3",
        "--backup-dir",
        "/b",
        "--backup-claim",
        "pvc",
    )
    assert server.apply(first) == []
    kept = dict(server.objects)
    second = _trainjob(capsys, "b", "--workers", "3", "--max-restarts", "1")
    assert server.apply(second) == []
    for key, doc in kept.items():
        assert server.objects[key] is doc, key
    (runtime_a,) = [d for d in first if d["kind"] == "TrainingRuntime"]
    (runtime_b,) = [d for d in second if d["kind"] == "TrainingRuntime"]
    assert runtime_a["spec"]["template"]["spec"]["failurePolicy"] == {"maxRestarts": 3}
    assert runtime_b["spec"]["template"]["spec"]["failurePolicy"] == {"maxRestarts": 1}
    pod = runtime_a["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert pod["template"]["spec"]["volumes"][0]["persistentVolumeClaim"] == {"claimName": "pvc"}
    # Each TrainJob points at its own runtime, in its own namespace.
    for docs in (first, second):
        runtime, job = docs
        assert job["spec"]["runtimeRef"]["kind"] == runtime["kind"] == "TrainingRuntime"
        assert job["spec"]["runtimeRef"]["name"] == runtime["metadata"]["name"]
        assert job["metadata"].get("namespace") == runtime["metadata"].get("namespace")


def test_reapplying_one_job_with_other_restarts_is_refused_as_the_crd_says(capsys):
    # Trainer's CRD makes failurePolicy immutable (a CEL `self == oldSelf`
    # rule): this is what a shared runtime ran into for every second job.
    server = crd_schema.FakeApiServer()
    assert server.apply(_trainjob(capsys, "a", "--workers", "2", "--max-restarts", "3")) == []
    refusals = server.apply(_trainjob(capsys, "a", "--workers", "2", "--max-restarts", "2"))
    assert any("failurePolicy: Value is immutable" in r for r in refusals), refusals


# ------------------------------------------------- RayJob: one worker per pod
def _ray_node(container, params, node_cpus=16):
    """What `ray start` in this pod advertises, as KubeRay v1.7.0 sets it.

    ray-operator/controllers/ray/common/pod.go: `num-cpus` from
    rayStartParams, else the container's CPU limit, else its request; with
    none Ray counts the machine's CPUs (`node_cpus`). `num-gpus` from the
    `nvidia.com/gpu` limit.
    """
    resources = container.get("resources", {})
    cpus = params.get("num-cpus")
    for part in ("limits", "requests"):
        cpus = cpus or resources.get(part, {}).get("cpu")
    have = {"CPU": float(cpus or node_cpus)}
    gpus = resources.get("limits", {}).get("nvidia.com/gpu", 0)
    if gpus:
        have["GPU"] = float(gpus)
    return {"Alive": True, "Resources": have}


@pytest.mark.parametrize("gpus", [0, 2])
def test_rayjob_pods_hold_one_ray_train_worker_each(gpus):
    job = kuberay.build_rayjob("r", "i", ["python", "t.py"], 3, gpus=gpus, cpus=8)
    cluster = job["spec"]["rayClusterSpec"]
    head_group = cluster["headGroupSpec"]
    (group,) = cluster["workerGroupSpecs"]
    # What each Ray Train worker asks for (Ray Train V2 ScalingConfig, as
    # the launcher builds it): 1 CPU, or K GPUs and no CPU.
    per_worker = {"GPU": gpus} if gpus else {"CPU": 1}
    (head,) = head_group["template"]["spec"]["containers"]
    assert ray_resources.room([_ray_node(head, head_group["rayStartParams"])], per_worker) == 0
    (worker,) = group["template"]["spec"]["containers"]
    pod = _ray_node(worker, group["rayStartParams"])
    assert ray_resources.room([pod], per_worker) == 1  # so one per pod, whatever the strategy
    assert ray_resources.room([pod] * group["replicas"], per_worker) == 3
    # Kubernetes gives the pod its CPUs and memory (requests = limits).
    assert worker["resources"]["requests"] == {"cpu": "8", "memory": "4Gi"}
    assert {"cpu": "8", "memory": "4Gi"}.items() <= worker["resources"]["limits"].items()
    assert head["resources"]["requests"] and head["resources"]["limits"]


# ------------------------------------------------- TFJob: success of all workers
def test_tfjob_succeeds_when_every_worker_has():
    job = k8s.build_tfjob("t", "i", CMD, 3)
    assert job["spec"]["successPolicy"] == "AllWorkers"
    assert job["spec"]["runPolicy"]["cleanPodPolicy"] == "Running"
    # With a Chief the operator decides success on the Chief and ignores the policy.
    assert "successPolicy" not in k8s.build_tfjob("t", "i", CMD, 2, ps=1)["spec"]
