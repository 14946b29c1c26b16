"""Kubeflow Training Operator `TFJob` manifests. Pure Python (no PyYAML).

`build_tfjob()` returns the manifest as a dict and `to_yaml()` writes it;
`tfdist-opt k8s --workers N [--ps P] --image I -- CMD` prints it for
`kubectl apply -f -`. The operator (kubeflow/training-operator, API
`kubeflow.org/v1`) then creates one pod and one headless Service per
replica and sets TF_CONFIG in each pod itself — the manifest carries no
TF_CONFIG. What the operator writes (pkg/controller.v1/tensorflow/
tensorflow.go, `genTFConfigJSONStr` / `genClusterSpec`):

    {"cluster": {"worker": ["JOB-worker-0.NS.svc:PORT", ...], "ps": [...]},
     "task": {"type": "worker", "index": I}, "environment": "cloud"}

with roles lower-cased, `.CUSTOM_CLUSTER_DOMAIN` appended to each host when
the operator has that variable, the port taken from the container named
`tensorflow`'s port named `tfjob-port` (default 2222), Evaluator replicas
left out of `cluster`, and no TF_CONFIG at all for a job of one replica.
`operator_tf_config()` reproduces it so tests can check that
`tfdist_opt` reads what a pod will see (`sources.tfjob_cluster`).

Restarts: under MultiWorkerMirroredStrategy a lost worker makes every
worker stop within seconds, so with `max_restarts=R > 0` every replica gets
`restartPolicy: OnFailure` and the job `runPolicy.backoffLimit: R`: each
failed pod restarts (with `DistributedBackupAndRestore` the group resumes
from the last backup); `0` means `Never`, as `tfdist-opt launch` does.
"""

from __future__ import annotations

import json
import re
from typing import Any, Mapping, Sequence

API_VERSION = "kubeflow.org/v1"
KIND = "TFJob"
CONTAINER_NAME = "tensorflow"  # the operator reads the port of this container
PORT_NAME = "tfjob-port"
DEFAULT_PORT = 2222
_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _check_label(field: str, value: Any, reserve: int = 0) -> None:
    if (not isinstance(value, str) or not _DNS_LABEL.match(value)
            or len(value) + reserve > 63):
        raise ValueError(
            f"Invalid value for `{field}`: expected a DNS label (lower-case "
            f"letters, digits, '-', starting with a letter, at most "
            f"{63 - reserve} characters so pod names fit). Received: "
            f"{field}={value!r}")


def _check_count(field: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"Invalid value for `{field}`: expected an int >= "
                         f"{minimum}. Received: {field}={value!r}")


def build_tfjob(name: str, image: str, command: Sequence[str], workers: int,
                ps: int = 0, namespace: str | None = None,
                port: int = DEFAULT_PORT, gpus: int = 0, max_restarts: int = 0,
                env: Mapping[str, str] | None = None) -> dict[str, Any]:
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
        gpus: int. `nvidia.com/gpu` limit per Worker/Chief pod. Defaults to `0`.
        max_restarts: int. `runPolicy.backoffLimit`; > 0 also sets
            `restartPolicy: OnFailure`. Defaults to `0` (`Never`).
        env: mapping or None. Extra environment for every container (e.g.
            `TFDIST_OPT_ALL_REDUCE=ring`). Defaults to `None`.

    Returns:
        dict, ready for `to_yaml`.

    Raises:
        ValueError: a bad field, named with the value received.
    """
    _check_label("name", name, reserve=len("-worker-") + len(str(max(workers, ps, 1))))
    if namespace is not None:
        _check_label("namespace", namespace)
    if not isinstance(image, str) or not image.strip() or any(c.isspace() for c in image):
        raise ValueError("Invalid value for `image`: expected a container image "
                         f"reference like 'registry/trainer:1.0'. Received: image={image!r}")
    if not command or not all(isinstance(a, str) for a in command):
        raise ValueError("Invalid value for `command`: expected the program to "
                         f"run after `--`. Received: command={list(command or [])!r}")
    _check_count("workers", workers, 1)
    _check_count("ps", ps, 0)
    _check_count("gpus", gpus, 0)
    _check_count("max_restarts", max_restarts, 0)
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise ValueError("Invalid value for `port`: expected an int in 1..65535. "
                         f"Received: port={port!r}")
    env = dict(env or {})
    for key in env:
        if not _ENV_NAME.match(key):
            raise ValueError("Invalid value for `env`: expected NAME=VALUE with a "
                             f"shell-style NAME. Received: {key!r}")
    env.setdefault("PYTHONUNBUFFERED", "1")

    restart = "OnFailure" if max_restarts else "Never"
    specs = {}
    if ps:
        specs["Chief"] = _replica(1, restart, image, command, port, gpus, env)
        specs["PS"] = _replica(ps, restart, image, command, port, 0, env)
    specs["Worker"] = _replica(workers, restart, image, command, port, gpus, env)
    metadata = {"name": name}
    if namespace:
        metadata["namespace"] = namespace
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": metadata,
        "spec": {
            "runPolicy": {"backoffLimit": max_restarts, "cleanPodPolicy": "Running"},
            "tfReplicaSpecs": specs,
        },
    }


def _replica(n, restart, image, command, port, gpus, env) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": image,
        "command": list(command),
        "ports": [{"name": PORT_NAME, "containerPort": port}],
        "env": [{"name": k, "value": str(v)} for k, v in sorted(env.items())],
    }
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    return {"replicas": n, "restartPolicy": restart,
            "template": {"spec": {"containers": [container]}}}


def operator_tf_config(job: Mapping[str, Any], role: str, index: int,
                       cluster_domain: str | None = None) -> dict[str, Any] | None:
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
        port = next(p["containerPort"] for c in spec["template"]["spec"]["containers"]
                    if c["name"] == CONTAINER_NAME for p in c["ports"]
                    if p["name"] == PORT_NAME)
        domain = f".{cluster_domain}" if cluster_domain else ""
        cluster[rt] = [f"{name}-{rt}-{i}.{namespace}.svc{domain}:{port}"
                       for i in range(spec["replicas"])]
    return {"cluster": cluster, "task": {"type": role.lower(), "index": index},
            "environment": "cloud"}


_TFJOB_HOST = re.compile(
    r"^(?P<job>[a-z][-a-z0-9]*)-(?P<role>chief|worker|ps|master)-(?P<i>\d+)"
    r"\.(?P<ns>[a-z0-9][-a-z0-9]*)\.svc(\.[a-z0-9.-]+)?$")


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
        raise ValueError("Invalid TFJob pod: TF_CONFIG is not set (the operator sets "
                         "none for a one-replica job). Received: TF_CONFIG unset")
    jobs = set()
    for role, addresses in cfg["cluster"].items():
        for address in addresses:
            host, _ = tf_config_lib.split_address(address)
            m = _TFJOB_HOST.match(host)
            if not m or m.group("role") != role:
                raise ValueError(
                    f"Invalid TFJob TF_CONFIG: cluster.{role} address {address!r} is "
                    "not a TFJob Service name; expected 'JOB-" + role +
                    "-I.NAMESPACE.svc[.DOMAIN]:PORT'. Received: "
                    f"cluster.{role}={addresses!r}")
            jobs.add((m.group("job"), m.group("ns")))
    if len(jobs) != 1:
        raise ValueError("Invalid TFJob TF_CONFIG: addresses name several jobs. "
                         f"Received: jobs={sorted(jobs)!r}")
    (job, namespace), = jobs
    task = cfg["task"]
    workers = tuple(cfg["cluster"].get("worker", ()))
    index = task["index"] if task["type"] == "worker" else None
    return sources.ClusterSource(
        workers, index, f"Kubeflow TFJob {job} (namespace {namespace}), this pod "
        f"{task['type']}:{task['index']}")


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
    return k if _PLAIN_KEY.match(k) and k not in ("true", "false", "null",
                                                  "yes", "no", "on", "off") else json.dumps(k)


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
                yield f"{pad}- {lines[0][indent + 2:]}"
                yield from lines[1:]
            else:
                yield f"{pad}- {_empty(v) if isinstance(v, (dict, list)) else _scalar(v)}\n"
    else:
        yield f"{pad}{_scalar(obj)}\n"


def _empty(v) -> str:
    return "{}" if isinstance(v, dict) else "[]"
