"""Kubeflow Trainer v2 manifests: a `TrainJob` and its TensorFlow runtime. Pure Python.

Kubeflow Trainer v2 (`trainer.kubeflow.org/v1alpha1`) runs a `TrainJob` on
a runtime that holds a JobSet template. It ships none for TensorFlow
(kubeflow/trainer#2699), so `build_tf_runtime()` writes one, following the
plain runtimes Kubeflow ships (jax, xgboost): `mlPolicy` with `numNodes`
and no framework policy (Trainer's PlainML plugin), one replicated job
named `node` labelled `trainer.kubeflow.org/trainjob-ancestor-step:
trainer`, one container named `node`. Trainer sets that Job's
`parallelism` and `completions` to the TrainJob's `trainer.numNodes` (one
Job, `replicas: 1`) and copies `trainer.image`, `command`, `env` and
`resourcesPerNode` onto the `node` container.

One runtime per job. The runtime is a namespaced `TrainingRuntime` named
after the job, in the job's namespace, not one shared cluster-scoped
`ClusterTrainingRuntime`, because what it holds is the job's: the port,
the backup volume and claim, and `failurePolicy.maxRestarts`. Trainer's
CRD makes `spec.template.spec.failurePolicy` (and `network`) immutable, so
a shared runtime refuses a second job's other `--max-restarts` while that
job's TrainJob is still created and runs with the first value; a shared
runtime re-applied without `--backup-dir` would drop the volume from every
later job of every namespace; and creating a cluster-scoped object needs
rights namespace users often lack. Nothing the runtime holds must be
shared between jobs, so nothing is.

What the runtime adds for TensorFlow: the variables from which
`tfdist_opt.cluster.jobset` builds each pod's TF_CONFIG (the JobSet labels
through the downward API, the port), an Indexed Job (each pod gets
`JOB_COMPLETION_INDEX`), DNS hostnames (`network.enableDNSHostnames`), the
backup volume, and restarts: a failed pod fails its Job (`backoffLimit: 0`,
`restartPolicy: Never`) and JobSet recreates every Job, up to
`failurePolicy.maxRestarts` times (a lost worker stops every
MultiWorkerMirroredStrategy worker anyway). Recreated pods lose an
`emptyDir`, so restarts that resume from backups need a claim.

`build_trainjob()` writes the TrainJob: `runtimeRef` to that runtime,
`trainer.numNodes` = workers, `trainer.env` carrying
`TFDIST_JOBSET_WORKERS` (the same number: Trainer's PlainML plugin gives
the pods no node count, see `tfdist_opt.cluster.jobset`) and the user's
variables, `resourcesPerNode.limits` with `nvidia.com/gpu`.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from tfdist_opt.cluster import jobset
from tfdist_opt.cluster import pod_spec

API_VERSION = "trainer.kubeflow.org/v1alpha1"
API_GROUP = "trainer.kubeflow.org"
TRAINJOB_KIND = "TrainJob"
RUNTIME_KIND = "TrainingRuntime"  # namespaced, one per job (the module docstring)
NODE = "node"  # Trainer's name for the trainer replicated job and container
ANCESTOR_LABEL = "trainer.kubeflow.org/trainjob-ancestor-step"
FRAMEWORK_LABEL = "trainer.kubeflow.org/framework"
PORT_NAME = "tf-port"
# Variables of a pod that Kubernetes or TensorFlow's setup owns, besides TFDIST_JOBSET_*.
RESERVED_ENV = frozenset({jobset.COMPLETION_INDEX_ENV, "TF_CONFIG"})


def _label_env(name: str, label: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{label}']"}}}


def build_tf_runtime(
    image: str,
    name: str,
    namespace: str | None = None,
    port: int = jobset.DEFAULT_PORT,
    max_restarts: int = 0,
    backup_dir: str | None = None,
    backup_claim: str | None = None,
) -> dict[str, Any]:
    """A namespaced `TrainingRuntime` holding one TensorFlow job's settings.

    Args:
        image: str. The container's image (a TrainJob's `trainer.image`
            replaces it).
        name: str. The runtime's name, which the TrainJob references (the
            CLI uses the job's name).
        namespace: str or None. The TrainJob's namespace (a TrainJob can
            reference a `TrainingRuntime` of its own namespace only).
            Defaults to `None` (kubectl's current one).
        port: int. Port of every worker's TF server. Defaults to `2222`.
        max_restarts: int. JobSet `failurePolicy.maxRestarts`: times every
            pod is recreated after one fails. Defaults to `0`.
        backup_dir: str or None. Where the backup volume is mounted.
            Defaults to `None` (no volume).
        backup_claim: str or None. PersistentVolumeClaim for `backup_dir`
            (ReadWriteMany); None: an emptyDir (warned: lost with its pod,
            so on every JobSet restart). Defaults to `None`.

    Returns:
        dict, ready for `yaml_writer.to_yaml`.

    Raises:
        ValueError: a bad field, named with the value received.
    """
    pod_spec.check_label("runtime", name)
    pod_spec.check_pod_fields(
        image=image,
        port=port,
        max_restarts=max_restarts,
        backup_dir=backup_dir,
        backup_claim=backup_claim,
        namespace=namespace,
    )
    pod_spec.warn_empty_dir(
        "JobSet restarts (max_restarts) recreate every pod, so no backup survives a restart",
        backup_dir,
        backup_claim,
    )
    env = [
        {"name": jobset.PORT_ENV, "value": str(port)},
        _label_env(jobset.NAME_ENV, jobset.JOBSET_NAME_LABEL),
        _label_env(jobset.REPLICATED_JOB_ENV, jobset.REPLICATED_JOB_LABEL),
        _label_env(jobset.JOB_INDEX_ENV, jobset.JOB_INDEX_LABEL),
        {"name": "PYTHONUNBUFFERED", "value": "1"},
    ]
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [pod_spec.container(NODE, image, None, env, 0, port, PORT_NAME, backup_dir)],
    }
    volumes = pod_spec.backup_volumes(backup_dir, backup_claim)
    if volumes:
        pod["volumes"] = volumes
    jobset_spec: dict[str, Any] = {
        "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
        "replicatedJobs": [
            {
                "name": NODE,
                "template": {
                    "metadata": {"labels": {ANCESTOR_LABEL: "trainer"}},
                    "spec": {
                        "completionMode": "Indexed",
                        "backoffLimit": 0,
                        "template": {"spec": pod},
                    },
                },
            }
        ],
    }
    if max_restarts:
        jobset_spec["failurePolicy"] = {"maxRestarts": max_restarts}
    metadata: dict[str, Any] = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    metadata["labels"] = {FRAMEWORK_LABEL: "tensorflow"}
    return {
        "apiVersion": API_VERSION,
        "kind": RUNTIME_KIND,
        "metadata": metadata,
        "spec": {"mlPolicy": {"numNodes": 1}, "template": {"spec": jobset_spec}},
    }


def build_trainjob(
    name: str,
    image: str,
    command: Sequence[str],
    workers: int,
    runtime: str | None = None,
    namespace: str | None = None,
    gpus: int = 0,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A `TrainJob` running `command` in `workers` pods of a TensorFlow runtime.

    Args:
        name: str. The TrainJob's name (a DNS label); it names the JobSet,
            so pods are `NAME-node-0-I.NAME`.
        image: str. Container image holding TensorFlow and the code.
        command: sequence of str. The program every pod runs.
        workers: int. Pods (`trainer.numNodes`, >= 1).
        runtime: str or None. The `TrainingRuntime` of the job's namespace
            (`build_tf_runtime`). Defaults to `None`: the job's name.
        namespace: str or None. Defaults to `None` (kubectl's current one).
        gpus: int. `nvidia.com/gpu` limit per pod. Defaults to `0`.
        env: mapping or None. Extra environment for every pod; the
            variables the runtime and Kubernetes set (`TFDIST_JOBSET_*`,
            `JOB_COMPLETION_INDEX`, `TF_CONFIG`) are refused, since
            Trainer's env upsert would let them override the runtime's.

    Returns:
        dict, ready for `yaml_writer.to_yaml`.

    Raises:
        ValueError: a bad field, named with the value received.
    """
    pod_spec.check_count("workers", workers, 1)
    pod_spec.check_label("name", name, reserve=len(f"-{NODE}-0-") + len(str(workers)))
    runtime = name if runtime is None else runtime
    pod_spec.check_label("runtime", runtime)
    env = pod_spec.check_pod_fields(
        image=image, command=command, gpus=gpus, env=env, namespace=namespace
    )
    for key in sorted(env):
        if key.startswith(jobset.ENV_PREFIX) or key in RESERVED_ENV:
            raise ValueError(
                f"Invalid value for `env`: {key} is set by the TensorFlow runtime, "
                f"Kubernetes or `workers` ({jobset.WORKERS_ENV}); Trainer would let "
                "this value override theirs. Expected no TFDIST_JOBSET_*, "
                f"{', '.join(sorted(RESERVED_ENV))}. Received: {key}={env[key]!r}"
            )
    env[jobset.WORKERS_ENV] = str(workers)
    trainer: dict[str, Any] = {
        "image": image,
        "command": list(command),
        "numNodes": workers,
        "env": pod_spec.env_list(env),
    }
    if gpus:
        trainer["resourcesPerNode"] = {"limits": {pod_spec.GPU_RESOURCE: gpus}}
    metadata = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    return {
        "apiVersion": API_VERSION,
        "kind": TRAINJOB_KIND,
        "metadata": metadata,
        "spec": {
            "runtimeRef": {"name": runtime, "apiGroup": API_GROUP, "kind": RUNTIME_KIND},
            "trainer": trainer,
        },
    }


def pod_environment(
    job: Mapping[str, Any], runtime: Mapping[str, Any], index: int
) -> dict[str, str]:
    """The variables pod `index` of `job` sees, as Kubernetes would resolve them.

    For tests: the runtime's container env with its downward-API labels
    filled in as JobSet labels the pod, the TrainJob's `trainer.env`
    merged over it (Trainer's upsert), and `JOB_COMPLETION_INDEX`.
    """
    name = job["metadata"]["name"]
    (rjob,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    labels = {
        jobset.JOBSET_NAME_LABEL: name,
        jobset.REPLICATED_JOB_LABEL: rjob["name"],
        jobset.JOB_INDEX_LABEL: "0",
    }
    (c,) = rjob["template"]["spec"]["template"]["spec"]["containers"]
    environ = {}
    for e in list(c["env"]) + list(job["spec"]["trainer"]["env"]):
        if "value" in e:
            environ[e["name"]] = e["value"]
        else:
            path = e["valueFrom"]["fieldRef"]["fieldPath"]
            label = path[len("metadata.labels['") : -len("']")]
            environ[e["name"]] = labels[label]
    environ[jobset.COMPLETION_INDEX_ENV] = str(index)
    return environ
