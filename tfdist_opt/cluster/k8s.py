"""Kubernetes manifests shared parts, and the Kubeflow `TFJob`. Pure Python.

`tfdist-opt k8s --kind KIND` writes one of three manifests, each from a
pure builder returning dicts that `to_yaml()` writes (no PyYAML):

- `tfjob` (here, `build_tfjob`): a Kubeflow Training Operator `TFJob`
  (`kubeflow.org/v1`), for clusters that still run the training-operator
  1.9 branch, the last that serves TFJob;
- `trainjob` (`tfdist_opt.cluster.trainjob`): a Kubeflow Trainer v2
  `TrainJob` and the TensorFlow `ClusterTrainingRuntime` Kubeflow does not
  ship; `tfdist_opt.cluster.jobset` builds each pod's TF_CONFIG;
- `rayjob` (`tfdist_opt.cluster.kuberay`): a KubeRay `RayJob` running
  `tfdist-opt launch --ray auto`.

The shared parts live here: field checks, the container (image, command,
env, `nvidia.com/gpu` limit), and the backup volume (`backup_volumes`): a
PersistentVolumeClaim when a claim is named, else an `emptyDir`, which
outlives a container restart in the same pod but not the pod.

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
"""

from __future__ import annotations

import json
import re
import warnings
from typing import Any, Mapping, Sequence

API_VERSION = "kubeflow.org/v1"
KIND = "TFJob"
CONTAINER_NAME = "tensorflow"  # the operator reads the port of this container
PORT_NAME = "tfjob-port"
DEFAULT_PORT = 2222
GPU_RESOURCE = "nvidia.com/gpu"
BACKUP_VOLUME = "tfdist-opt-backup"
_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# ------------------------------------------------------------ field checks
def check_label(field: str, value: Any, reserve: int = 0) -> None:
    """Raises unless `value` is a DNS label with `reserve` characters to spare."""
    if not isinstance(value, str) or not _DNS_LABEL.match(value) or len(value) + reserve > 63:
        raise ValueError(
            f"Invalid value for `{field}`: expected a DNS label (lower-case "
            f"letters, digits, '-', starting with a letter, at most "
            f"{63 - reserve} characters so pod names fit). Received: "
            f"{field}={value!r}"
        )


def check_count(field: str, value: Any, minimum: int) -> None:
    """Raises unless `value` is an int (not a bool) >= `minimum`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(
            f"Invalid value for `{field}`: expected an int >= "
            f"{minimum}. Received: {field}={value!r}"
        )


def check_pod_fields(
    *,
    image: Any,
    command: Any = None,
    gpus: Any = 0,
    port: Any = None,
    max_restarts: Any = 0,
    env: Mapping[str, str] | None = None,
    backup_dir: Any = None,
    backup_claim: Any = None,
    namespace: Any = None,
) -> dict[str, str]:
    """Checks what every manifest kind shares; returns the env to set.

    `command` and `port` are checked unless None.

    Raises:
        ValueError: a bad field, named with the value received.
    """
    if namespace is not None:
        check_label("namespace", namespace)
    if not isinstance(image, str) or not image.strip() or any(c.isspace() for c in image):
        raise ValueError(
            "Invalid value for `image`: expected a container image "
            f"reference like 'registry/trainer:1.0'. Received: image={image!r}"
        )
    if command is not None and (
        not command or isinstance(command, str) or not all(isinstance(a, str) for a in command)
    ):
        raise ValueError(
            "Invalid value for `command`: expected the program to "
            f"run after `--`. Received: command={command!r}"
        )
    check_count("gpus", gpus, 0)
    check_count("max_restarts", max_restarts, 0)
    if port is not None and (
        isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535
    ):
        raise ValueError(
            f"Invalid value for `port`: expected an int in 1..65535. Received: port={port!r}"
        )
    if backup_dir is not None and (
        not isinstance(backup_dir, str)
        or not backup_dir.startswith("/")
        or ":" in backup_dir
        or any(c.isspace() for c in backup_dir)
    ):
        raise ValueError(
            "Invalid value for `backup_dir`: expected an absolute "
            "path in the container (no ':' or spaces), the one the "
            "program gives DistributedBackupAndRestore. Received: "
            f"backup_dir={backup_dir!r}"
        )
    if backup_claim is not None:
        if backup_dir is None:
            raise ValueError(
                "Invalid value for `backup_claim`: it names the "
                "volume mounted at `backup_dir`; set backup_dir too. "
                f"Received: backup_claim={backup_claim!r}, backup_dir=None"
            )
        if (
            not isinstance(backup_claim, str)
            or not _DNS_SUBDOMAIN.match(backup_claim)
            or len(backup_claim) > 253
        ):
            raise ValueError(
                "Invalid value for `backup_claim`: expected the name "
                "of a PersistentVolumeClaim in the job's namespace. "
                f"Received: backup_claim={backup_claim!r}"
            )
    env = dict(env or {})
    for key in env:
        if not isinstance(key, str) or not _ENV_NAME.match(key):
            raise ValueError(
                "Invalid value for `env`: expected NAME=VALUE with a "
                f"shell-style NAME. Received: {key!r}"
            )
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


# ------------------------------------------------------------ pod pieces
def env_list(env: Mapping[str, str]) -> list[dict[str, Any]]:
    """`[{"name": K, "value": V}, ...]`, sorted by name."""
    return [{"name": k, "value": str(v)} for k, v in sorted(env.items())]


def container(
    name: str,
    image: str,
    command: Sequence[str] | None,
    env: list[dict[str, Any]],
    gpus: int = 0,
    port: int | None = None,
    port_name: str | None = None,
    backup_dir: str | None = None,
) -> dict[str, Any]:
    """A pod's container: `gpus` > 0 sets the `nvidia.com/gpu` limit.

    Kubernetes schedules extended resources such as GPUs by their limit (a
    request, if given, must equal it), so only the limit is written.
    """
    c: dict[str, Any] = {"name": name, "image": image}
    if command is not None:
        c["command"] = list(command)
    if port is not None:
        c["ports"] = [
            {"name": port_name, "containerPort": port} if port_name else {"containerPort": port}
        ]
    c["env"] = env
    if gpus:
        c["resources"] = {"limits": {GPU_RESOURCE: gpus}}
    if backup_dir is not None:
        c["volumeMounts"] = [{"name": BACKUP_VOLUME, "mountPath": backup_dir}]
    return c


def backup_volumes(backup_dir: str | None, backup_claim: str | None) -> list[dict[str, Any]]:
    """The pod's backup volume: the claim when named, else an emptyDir; none without a dir."""
    if backup_dir is None:
        return []
    if backup_claim is not None:
        return [{"name": BACKUP_VOLUME, "persistentVolumeClaim": {"claimName": backup_claim}}]
    return [{"name": BACKUP_VOLUME, "emptyDir": {}}]


def warn_empty_dir(detail: str, backup_dir: str | None, backup_claim: str | None) -> None:
    """Warns that an emptyDir backup volume is deleted with its pod."""
    if backup_dir is not None and backup_claim is None:
        warnings.warn(
            f"backup_dir={backup_dir!r} is an emptyDir volume, deleted with its "
            f"pod (pod deleted, evicted or rescheduled, node lost); {detail}. "
            "Name a PersistentVolumeClaim (backup_claim, --backup-claim) to keep "
            "backups across pods.",
            stacklevel=3,
        )


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
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": metadata,
        "spec": {
            "runPolicy": {
                "backoffLimit": max_restarts * replicas + 1 if max_restarts else 0,
                "cleanPodPolicy": "Running",
            },
            "tfReplicaSpecs": specs,
        },
    }


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


# ------------------------------------------------------------------ YAML
_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]*$")


def to_yaml(obj: Any) -> str:
    """Block-style YAML for dicts, lists, str, int, bool, None.

    Strings are written double-quoted with JSON escapes (valid YAML), so no
    value can be misread as a number, a bool or YAML syntax.
    """
    return "".join(_emit(obj, 0)) or "{}\n"


def _scalar(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v)
    raise TypeError(f"to_yaml: unsupported value type {type(v).__name__}: {v!r}")


def _key(k: Any) -> str:
    if not isinstance(k, str):
        raise TypeError(f"to_yaml: keys must be str. Received: {k!r}")
    return (
        k
        if _PLAIN_KEY.match(k) and k not in ("true", "false", "null", "yes", "no", "on", "off")
        else json.dumps(k)
    )


def _emit(obj: Any, indent: int):
    pad = " " * indent
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(v, (dict, list)) and v:
                yield f"{pad}{_key(k)}:\n"
                yield from _emit(v, indent + 2)
            else:
                yield f"{pad}{_key(k)}: {_empty(v) if isinstance(v, (dict, list)) else _scalar(v)}\n"
    elif isinstance(obj, list):
        for v in obj:
            if isinstance(v, (dict, list)) and v:
                lines = list(_emit(v, indent + 2))
                yield f"{pad}- {lines[0][indent + 2 :]}"
                yield from lines[1:]
            else:
                yield f"{pad}- {_empty(v) if isinstance(v, (dict, list)) else _scalar(v)}\n"
    else:
        yield f"{pad}{_scalar(obj)}\n"


def _empty(v) -> str:
    return "{}" if isinstance(v, dict) else "[]"
