"""A KubeRay `RayJob` running `tfdist-opt launch --ray auto`. Pure Python.

KubeRay (`ray.io/v1`) starts a Ray cluster for a `RayJob` (`spec.
rayClusterSpec`: one head pod, `workerGroupSpecs` of worker pods), submits
`spec.entrypoint` to it, and with `shutdownAfterJobFinishes` deletes the
cluster when the job ends. The entrypoint here is the launcher's Ray
backend joining that cluster:

    tfdist-opt launch --ray auto -n N [--gpus-per-worker K] [--max-restarts R]
        [--ray-storage DIR] -- python train.py ...

so Ray Train places N workers, gives each its TF_CONFIG and restarts the
group up to R times (`FailureConfig`).

One Ray Train worker per worker pod. Ray Train's default placement
(`PACK`) fills a node before the next, and a raylet without `num-cpus`
advertises what KubeRay derives from the pod (its CPU limit, or the
node's CPUs when the pod has none), so two 1-CPU workers could share one
pod while another pod idles. Here the head starts Ray with `num-cpus: 0`
(no worker lands there) and each worker pod with `num-cpus: 1`: a Ray
Train worker asks for one CPU (or, with `--gpus-per-worker K`, K GPUs,
the pod's `nvidia.com/gpu` limit, which KubeRay passes to `ray start`),
so exactly one fits a pod. The `num-cpus` is Ray's scheduling count only;
Kubernetes gives the pod `cpus` CPUs and `memory` (requests = limits), and
TensorFlow in the worker uses them. The head gets what KubeRay's RayJob
sample gives it (1 CPU, 2Gi requested, 5Gi limit): it runs the GCS, the
dashboard and the launcher.

Backups: Ray Train keeps checkpoints in `--ray-storage`, which every pod
must share, so `backup_dir` needs a PersistentVolumeClaim (ReadWriteMany),
mounted at `backup_dir` on the head and every worker pod and passed as
`--ray-storage`; an `emptyDir` (one per pod) cannot serve and is refused.
"""

from __future__ import annotations

import os
import re
import shlex
from typing import Any, Mapping, Sequence

from tfdist_opt.cluster import pod_spec

API_VERSION = "ray.io/v1"
KIND = "RayJob"
MAX_NAME = 47
DEFAULT_RAY_VERSION = "2.60.0"  # the Ray the package is tested with (setup.py)
HEAD_CONTAINER = "ray-head"
WORKER_CONTAINER = "ray-worker"
WORKER_GROUP = "workers"
# The head's ports, as KubeRay's samples name them: GCS, dashboard (job
# submission), Ray client.
HEAD_PORTS = (("gcs-server", 6379), ("dashboard", 8265), ("client", 10001))
_PYTHON = re.compile(r"python[0-9.]*")
# A Kubernetes quantity as written here: whole CPUs; memory in bytes or a binary/decimal suffix.
_MEMORY = re.compile(r"^[1-9][0-9]*(Ki|Mi|Gi|Ti|k|M|G|T)?$")
DEFAULT_CPUS = 1
DEFAULT_MEMORY = "4Gi"
HEAD_RESOURCES = {
    "requests": {"cpu": "1", "memory": "2Gi"},
    "limits": {"cpu": "1", "memory": "5Gi"},
}


def entrypoint(
    command: Sequence[str],
    workers: int,
    gpus: int = 0,
    max_restarts: int = 0,
    storage: str | None = None,
) -> str:
    """The `tfdist-opt launch --ray auto ...` line the RayJob submits."""
    argv = ["tfdist-opt", "launch", "--ray", "auto", "-n", str(workers)]
    if gpus:
        argv += ["--gpus-per-worker", str(gpus)]
    if max_restarts:
        argv += ["--max-restarts", str(max_restarts)]
    if storage:
        argv += ["--ray-storage", storage]
    return shlex.join([*argv, "--", *command])


def build_rayjob(
    name: str,
    image: str,
    command: Sequence[str],
    workers: int,
    namespace: str | None = None,
    gpus: int = 0,
    max_restarts: int = 0,
    env: Mapping[str, str] | None = None,
    backup_dir: str | None = None,
    backup_claim: str | None = None,
    ray_version: str = DEFAULT_RAY_VERSION,
    cpus: int = DEFAULT_CPUS,
    memory: str = DEFAULT_MEMORY,
) -> dict[str, Any]:
    """A `RayJob`: a head pod, `workers` worker pods, the launcher as entrypoint.

    Args:
        name: str. The RayJob's name (a DNS label).
        image: str. Container image holding Ray (`ray[train]`), TensorFlow,
            tfdist_opt and the code, for the head and the workers.
        command: sequence of str. `python SCRIPT ...` or `python -m MODULE
            ...`: Ray Train runs it inside each worker process.
        workers: int. Worker pods and Ray Train workers (>= 1).
        namespace: str or None. Defaults to `None` (kubectl's current one).
        gpus: int. `nvidia.com/gpu` limit per worker pod and GPUs per Ray
            Train worker (`--gpus-per-worker`). Defaults to `0`.
        max_restarts: int. Group restarts (`launch --max-restarts`).
            Defaults to `0`.
        env: mapping or None. Extra environment for every pod.
        backup_dir: str or None. Mount path of `backup_claim` on every pod,
            and Ray Train's storage (`--ray-storage`). Defaults to `None`.
        backup_claim: str or None. A ReadWriteMany PersistentVolumeClaim;
            required with `backup_dir`. Defaults to `None`.
        ray_version: str. `rayClusterSpec.rayVersion`; must match the
            image's Ray. Defaults to `"2.60.0"`.
        cpus: int. CPUs of each worker pod (Kubernetes request and limit).
            Defaults to `1`.
        memory: str. Memory of each worker pod, a Kubernetes quantity such
            as `"16Gi"` (request and limit). Defaults to `"4Gi"`.

    Returns:
        dict, ready for `yaml_writer.to_yaml`.

    Raises:
        ValueError: a bad field, named with the value received.
    """
    pod_spec.check_count("workers", workers, 1)
    # KubeRay's webhook: a RayJob name of at most 47 characters (its cluster
    # gets 6 more, and a RayCluster name at most 53; MaxRayJobNameLength).
    pod_spec.check_label("name", name, reserve=63 - MAX_NAME)
    env = pod_spec.check_pod_fields(
        image=image,
        command=command,
        gpus=gpus,
        max_restarts=max_restarts,
        env=env,
        backup_dir=backup_dir,
        backup_claim=backup_claim,
        namespace=namespace,
    )
    command = list(command)
    exe = os.path.basename(command[0])
    if (
        not _PYTHON.fullmatch(exe)
        or len(command) < 2
        or (command[1].startswith("-") and command[1] != "-m")
        or command[1:] == ["-m"]
    ):
        raise ValueError(
            "Invalid value for `command` with kind rayjob: Ray Train runs a "
            "Python script inside each worker. Expected `python SCRIPT.py "
            f"ARGS...` or `python -m MODULE ARGS...`. Received: {shlex.join(command)}"
        )
    if backup_dir is not None and backup_claim is None:
        raise ValueError(
            "Invalid value for `backup_claim` with kind rayjob: Ray Train's "
            "storage must be shared by every pod, which an emptyDir is not. "
            "Expected a ReadWriteMany PersistentVolumeClaim. Received: "
            f"backup_claim=None with backup_dir={backup_dir!r}"
        )
    if not isinstance(ray_version, str) or not re.fullmatch(r"\d+\.\d+\.\d+", ray_version):
        raise ValueError(
            "Invalid value for `ray_version`: expected X.Y.Z, the "
            f"image's Ray. Received: ray_version={ray_version!r}"
        )

    pod_spec.check_count("cpus", cpus, 1)
    if not isinstance(memory, str) or not _MEMORY.match(memory):
        raise ValueError(
            "Invalid value for `memory`: expected a Kubernetes memory quantity "
            f"such as '4Gi' or '512Mi'. Received: memory={memory!r}"
        )

    volumes = pod_spec.backup_volumes(backup_dir, backup_claim)
    head = pod_spec.container(
        HEAD_CONTAINER, image, None, pod_spec.env_list(env), backup_dir=backup_dir
    )
    head["ports"] = [{"name": n, "containerPort": p} for n, p in HEAD_PORTS]
    head["resources"] = {k: dict(v) for k, v in HEAD_RESOURCES.items()}
    worker = pod_spec.container(
        WORKER_CONTAINER, image, None, pod_spec.env_list(env), gpus, backup_dir=backup_dir
    )
    quantities = {"cpu": str(cpus), "memory": memory}
    limits = worker.get("resources", {}).get("limits", {})
    worker["resources"] = {"requests": dict(quantities), "limits": {**quantities, **limits}}
    metadata = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": metadata,
        "spec": {
            "entrypoint": entrypoint(command, workers, gpus, max_restarts, backup_dir),
            "shutdownAfterJobFinishes": True,
            "ttlSecondsAfterFinished": 300,
            "rayClusterSpec": {
                "rayVersion": ray_version,
                "headGroupSpec": {
                    "rayStartParams": {"num-cpus": "0"},
                    "template": {"spec": _pod_spec(head, volumes)},
                },
                "workerGroupSpecs": [
                    {
                        "groupName": WORKER_GROUP,
                        "replicas": workers,
                        "minReplicas": workers,
                        "maxReplicas": workers,
                        # One logical CPU: one Ray Train worker per pod (module docstring).
                        "rayStartParams": {"num-cpus": "1"},
                        "template": {"spec": _pod_spec(worker, volumes)},
                    }
                ],
            },
        },
    }


def _pod_spec(container: dict[str, Any], volumes: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [container]}
    if volumes:
        spec["volumes"] = volumes
    return spec
