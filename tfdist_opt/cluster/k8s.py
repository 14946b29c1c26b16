"""The Kubeflow `TFJob` manifest, and the entry to the Kubernetes manifests. Pure Python.

`tfdist-opt k8s --kind KIND` writes one of three manifests, each from a
pure builder returning dicts that `to_yaml()` writes (no PyYAML):

- `tfjob` (here, `build_tfjob`): a Kubeflow Training Operator `TFJob`
  (`kubeflow.org/v1`), for clusters that still run the training-operator
  1.9 branch, the last that serves TFJob;
- `trainjob` (`tfdist_opt.cluster.trainjob`): a Kubeflow Trainer v2
  `TrainJob` and its own TensorFlow `TrainingRuntime` (Kubeflow ships
  none); `tfdist_opt.cluster.jobset` builds each pod's TF_CONFIG;
- `rayjob` (`tfdist_opt.cluster.kuberay`): a KubeRay `RayJob` running
  `tfdist-opt launch --ray auto`.

The parts every kind shares (field checks, the container, the backup
volume) live in `tfdist_opt.cluster.pod_spec`, the YAML writer in
`tfdist_opt.cluster.yaml_writer`; both are re-exported here.

TFJob. The operator (kubeflow/training-operator, API `kubeflow.org/v1`)
creates one pod and one headless Service per replica and sets TF_CONFIG in
each pod itself — the manifest carries no TF_CONFIG. What the operator
writes (pkg/controller.v1/tensorflow/tensorflow.go, `genTFConfigJSONStr` /
`genClusterSpec`):

    {"cluster": {"worker": ["JOB-worker-0.NS.svc:PORT", ...], "ps": [...]},
     "task": {"type": "worker", "index": I}, "environment": "cloud"}

with roles lower-cased, `.CUSTOM_CLUSTER_DOMAIN` appended to each host when
the operator has that variable, the port taken from the container named
`tensorflow`'s port named `tfjob-port` (default 2222), Evaluator replicas
left out of `cluster`, and no TF_CONFIG at all for a job of one replica.
`operator_tf_config()` reproduces it so tests can check that
`tfdist_opt` reads what a pod will see (`tfjob_cluster`).

TFJob restarts: under MultiWorkerMirroredStrategy a lost worker makes every
worker stop within seconds, so with `max_restarts=R > 0` every replica gets
`restartPolicy: OnFailure` (the container restarts in its pod, so an
`emptyDir` backup volume survives) and the job a `runPolicy.backoffLimit`
of `R * replicas + 1`: the operator fails the job once the container
restarts summed over all its running pods reach `backoffLimit`
(`pastBackoffLimit`), and one restart of the whole group is one restart per
replica. `0` means `Never`, as `tfdist-opt launch` does.

TFJob success. Without a Chief the operator marks the job succeeded when
worker 0 completes (its default success policy), and `cleanPodPolicy:
Running` then deletes the workers still running, which under all-reduce
may still be writing their part of a checkpoint or backup. So a job
without parameter servers gets `successPolicy: AllWorkers`: it succeeds
once every worker has (`tfjob_controller.go`, `updateJobStatus`), and
`cleanPodPolicy: Running` deletes no worker on success; on failure it
deletes the survivors, which would otherwise wait on collectives of the
lost worker until they time out. With `ps > 0` the Chief decides success
(the operator ignores the success policy when there is one) and `Running`
deletes the PS and worker pods still serving once the Chief has finished.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, Sequence

from tfdist_opt.cluster.pod_spec import (  # noqa: F401  (re-exported: the shared parts)
    BACKUP_VOLUME,
    GPU_RESOURCE,
    backup_volumes,
    check_count,
    check_label,
    check_pod_fields,
    container,
    env_list,
    warn_empty_dir,
)
from tfdist_opt.cluster.yaml_writer import to_yaml  # noqa: F401  (re-exported)

API_VERSION = "kubeflow.org/v1"
KIND = "TFJob"
CONTAINER_NAME = "tensorflow"  # the operator reads the port of this container
PORT_NAME = "tfjob-port"
DEFAULT_PORT = 2222
SUCCESS_ALL_WORKERS = "AllWorkers"


# ------------------------------------------------------------ TFJob
def build_tfjob(
    name: str,
    image: str,
    command: Sequence[str],
    workers: int,
    ps: int = 0,
    namespace: str | None = None,
    port: int = DEFAULT_PORT,
    gpus: int = 0,
    max_restarts: int = 0,
    env: Mapping[str, str] | None = None,
    backup_dir: str | None = None,
    backup_claim: str | None = None,
) -> dict[str, Any]:
    """A `TFJob` manifest: `workers` Worker pods (+ `ps` PS pods and a Chief).

    Args:
        name: str. The TFJob's name (a DNS label); pods and Services are
            `NAME-worker-I`, `NAME-ps-I`, `NAME-chief-0`.
        image: str. Container image holding TensorFlow and the code.
        command: sequence of str. The program every replica runs.
        workers: int. Worker replicas (>= 1).
        ps: int. Parameter-server replicas. With ps > 0 a Chief replica
            (the coordinator ParameterServerStrategy needs) is added.
            Defaults to `0`.
        namespace: str or None. Defaults to `None` (kubectl's current one).
        port: int. The `tfjob-port` every replica listens on. Defaults to `2222`.
        gpus: int. `nvidia.com/gpu` limit per Worker/Chief pod (PS pods get
            none). Defaults to `0`.
        max_restarts: int. Whole-group restarts: > 0 sets `restartPolicy:
            OnFailure` and `runPolicy.backoffLimit` to `R * replicas + 1`
            (see the module docstring). Defaults to `0` (`Never`).
        env: mapping or None. Extra environment for every container (e.g.
            `TFDIST_OPT_ALL_REDUCE=ring`). Defaults to `None`.
        backup_dir: str or None. Absolute path where every container mounts
            the backup volume; give the program the same path as
            `DistributedBackupAndRestore(backup_dir=...)`. Defaults to `None`
            (no volume: a restarted container starts without backups).
        backup_claim: str or None. A PersistentVolumeClaim to mount at
            `backup_dir` (ReadWriteMany when pods may land on several nodes).
            None: an `emptyDir`, which survives container restarts in the
            pod (restartPolicy OnFailure) but not the pod; a warning says
            so. Defaults to `None`.

    Returns:
        dict, ready for `to_yaml`.

    Raises:
        ValueError: a bad field, named with the value received.
    """
    check_count("workers", workers, 1)
    check_count("ps", ps, 0)
    check_label("name", name, reserve=len("-worker-") + len(str(max(workers, ps))))
    env = check_pod_fields(
        image=image,
        command=command,
        gpus=gpus,
        port=port,
        max_restarts=max_restarts,
        env=env,
        backup_dir=backup_dir,
        backup_claim=backup_claim,
        namespace=namespace,
    )
    warn_empty_dir(
        "it survives the in-place container restarts of max_restarts (restartPolicy OnFailure)",
        backup_dir,
        backup_claim,
    )

    restart = "OnFailure" if max_restarts else "Never"
    pod = dict(
        restart=restart,
        image=image,
        command=command,
        port=port,
        env=env,
        backup_dir=backup_dir,
        backup_claim=backup_claim,
    )
    specs = {}
    if ps:
        specs["Chief"] = _replica(1, gpus=gpus, **pod)
        specs["PS"] = _replica(ps, gpus=0, **pod)
    specs["Worker"] = _replica(workers, gpus=gpus, **pod)
    replicas = sum(s["replicas"] for s in specs.values())
    metadata = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    spec: dict[str, Any] = {
        "runPolicy": {
            "backoffLimit": max_restarts * replicas + 1 if max_restarts else 0,
            "cleanPodPolicy": "Running",
        },
    }
    if not ps:
        # Success when every worker has succeeded, not worker 0 alone (module docstring).
        spec["successPolicy"] = SUCCESS_ALL_WORKERS
    spec["tfReplicaSpecs"] = specs
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec}


def _replica(
    n, *, restart, image, command, port, gpus, env, backup_dir, backup_claim
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            container(
                CONTAINER_NAME, image, command, env_list(env), gpus, port, PORT_NAME, backup_dir
            )
        ]
    }
    volumes = backup_volumes(backup_dir, backup_claim)
    if volumes:
        spec["volumes"] = volumes
    return {"replicas": n, "restartPolicy": restart, "template": {"spec": spec}}


def operator_tf_config(
    job: Mapping[str, Any], role: str, index: int, cluster_domain: str | None = None
) -> dict[str, Any] | None:
    """The TF_CONFIG the Training Operator gives replica `role` `index` of `job`.

    Mirrors `genClusterSpec` / `genTFConfigJSONStr` (see the module
    docstring); None for a one-replica job (the operator sets none).
    """
    name = job["metadata"]["name"]
    namespace = job["metadata"].get("namespace", "default")
    specs = job["spec"]["tfReplicaSpecs"]
    if sum(s["replicas"] for s in specs.values()) < 2:
        return None
    cluster = {}
    for rtype, spec in specs.items():
        if rtype == "Evaluator":
            continue
        rt = rtype.lower()
        port = next(
            p["containerPort"]
            for c in spec["template"]["spec"]["containers"]
            if c["name"] == CONTAINER_NAME
            for p in c["ports"]
            if p["name"] == PORT_NAME
        )
        domain = f".{cluster_domain}" if cluster_domain else ""
        cluster[rt] = [
            f"{name}-{rt}-{i}.{namespace}.svc{domain}:{port}" for i in range(spec["replicas"])
        ]
    return {
        "cluster": cluster,
        "task": {"type": role.lower(), "index": index},
        "environment": "cloud",
    }


_TFJOB_HOST = re.compile(
    r"^(?P<job>[a-z][-a-z0-9]*)-(?P<role>chief|worker|ps|master)-(?P<i>\d+)"
    r"\.(?P<ns>[a-z0-9][-a-z0-9]*)\.svc(\.[a-z0-9.-]+)?$"
)


def tfjob_cluster(environ: Mapping[str, str] | None = None) -> "sources.ClusterSource":
    """This pod's cluster, from the TF_CONFIG the Training Operator set.

    The k8s cluster source for TFJob pods (the StatefulSet one is
    `sources.statefulset_cluster`): TF_CONFIG is validated as TensorFlow
    would use it (`tf_config.validate_tf_config`, which accepts the
    operator's `"environment": "cloud"`), and every address must be a
    TFJob Service name of one job (`JOB-ROLE-I.NAMESPACE.svc[.DOMAIN]:PORT`).

    Returns:
        `ClusterSource` of the worker addresses, this pod's index when it is
        a worker, and a description naming the job and namespace.

    Raises:
        ValueError: no TF_CONFIG (one-replica job, or not a TFJob pod), or
            one that is not the operator's.
    """
    from tfdist_opt.cluster import sources  # pylint: disable=g-import-not-at-top
    from tfdist_opt.cluster import tf_config as tf_config_lib  # pylint: disable=g-import-not-at-top

    cfg = tf_config_lib.tf_config_from_env(environ)
    if cfg is None:
        raise ValueError(
            "Invalid TFJob pod: TF_CONFIG is not set (the operator sets "
            "none for a one-replica job). Received: TF_CONFIG unset"
        )
    jobs = set()
    for role, addresses in cfg["cluster"].items():
        for address in addresses:
            host, _ = tf_config_lib.split_address(address)
            m = _TFJOB_HOST.match(host)
            if not m or m.group("role") != role:
                raise ValueError(
                    f"Invalid TFJob TF_CONFIG: cluster.{role} address {address!r} is "
                    "not a TFJob Service name; expected 'JOB-"
                    + role
                    + "-I.NAMESPACE.svc[.DOMAIN]:PORT'. Received: "
                    f"cluster.{role}={addresses!r}"
                )
            jobs.add((m.group("job"), m.group("ns")))
    if len(jobs) != 1:
        raise ValueError(
            f"Invalid TFJob TF_CONFIG: addresses name several jobs. Received: jobs={sorted(jobs)!r}"
        )
    ((job, namespace),) = jobs
    task = cfg["task"]
    workers = tuple(cfg["cluster"].get("worker", ()))
    index = task["index"] if task["type"] == "worker" else None
    return sources.ClusterSource(
        workers,
        index,
        f"Kubeflow TFJob {job} (namespace {namespace}), this pod {task['type']}:{task['index']}",
    )
