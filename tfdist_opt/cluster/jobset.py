"""TF_CONFIG for a pod of a JobSet (Kubeflow Trainer v2). Pure Python.

Kubeflow Trainer v2 runs a `TrainJob` as a JobSet and ships runtimes for
PyTorch, MPI, JAX, XGBoost and a plain one, none for TensorFlow
(kubeflow/trainer#2699; #2443: "set TF_CONFIG yourself"). The runtime
`tfdist-opt k8s --kind trainjob` writes (`tfdist_opt.cluster.trainjob`)
gives each pod what this module needs to build TF_CONFIG itself, so the
manifest carries no per-pod TF_CONFIG:

- `JOB_COMPLETION_INDEX`: this pod's index, set by Kubernetes in every pod
  of an Indexed Job (JobSet's Jobs are Indexed);
- `TFDIST_JOBSET_WORKERS`: the number of pods (the TrainJob's `numNodes`,
  written next to it in the TrainJob's `trainer.env`; see "The worker
  count" below);
- `TFDIST_JOBSET_NAME`, `TFDIST_JOBSET_REPLICATED_JOB`,
  `TFDIST_JOBSET_JOB_INDEX`: the pod labels JobSet sets
  (`jobset.sigs.k8s.io/jobset-name`, `.../replicatedjob-name`,
  `.../job-index`), through the downward API;
- `TFDIST_JOBSET_PORT`: the port every worker's TF server listens on;
- `TFDIST_JOBSET_SUBDOMAIN` (optional): JobSet's `network.subdomain`,
  which defaults to the JobSet's name.

JobSet gives every pod the stable hostname
`<jobset>-<replicatedjob>-<jobIdx>-<podIdx>.<subdomain>` (Trainer v2 names
the JobSet after the TrainJob, runs one Job, index 0, of `numNodes` pods
in the replicated job `node`), so pod I's TF_CONFIG is
`{"cluster": {"worker": [host_0:port, ..., host_{N-1}:port]}, "task":
{"type": "worker", "index": I}}`: worker 0 is the chief, as in every
cluster without a `chief` task. One worker gets no TF_CONFIG (as the TFJob
operator does for one replica): a single-process strategy.

The worker count. Nothing Trainer or JobSet puts in a pod of this runtime
carries the number of pods: Trainer's PlainML plugin (a runtime without a
framework policy) only copies `numNodes` into the Job's `parallelism` and
`completions` and `trainer.env` onto the container (its torch and JAX
plugins add `PET_NNODES`, `JAX_NUM_PROCESSES`, which this runtime cannot
use without being a torch or JAX runtime); JobSet's pod labels and
annotations count Jobs (`jobset.sigs.k8s.io/replicatedjob-replicas`,
`global-replicas`), not the pods of a Job; and the downward API exposes a
pod's own fields, not its Job's `completions`. So the count comes from
`trainer.env`, which a TrainJob written another way (the Kubeflow SDK's
`num_nodes`, hand-written YAML) may lack: a pod with the runtime's
variables (`TFDIST_JOBSET_NAME`, ...) and no `TFDIST_JOBSET_WORKERS` is an
error naming it, never a silent single-worker run.

`opt_strategy()` calls `apply_jobset_tf_config()` where it reads TF_CONFIG
(`tfdist_opt.strategy.topology.detect_topology`): without TF_CONFIG and with
`TFDIST_JOBSET_WORKERS` set, it writes TF_CONFIG into the environment
(through `tf_config.apply_tf_config`, before TensorFlow reads it).
Variables are named `TFDIST_JOBSET_*`, not `TFDIST_OPT_*`: the latter
are `StrategyConfig` fields.
"""

from __future__ import annotations

import os
import re
from typing import Any, Mapping, MutableMapping

from tfdist_opt.cluster import tf_config as tf_config_lib

ENV_PREFIX = "TFDIST_JOBSET_"
WORKERS_ENV = "TFDIST_JOBSET_WORKERS"
NAME_ENV = "TFDIST_JOBSET_NAME"
REPLICATED_JOB_ENV = "TFDIST_JOBSET_REPLICATED_JOB"
JOB_INDEX_ENV = "TFDIST_JOBSET_JOB_INDEX"
PORT_ENV = "TFDIST_JOBSET_PORT"
SUBDOMAIN_ENV = "TFDIST_JOBSET_SUBDOMAIN"
COMPLETION_INDEX_ENV = "JOB_COMPLETION_INDEX"  # set by Kubernetes (Indexed Job)

# The pod labels JobSet sets (sigs.k8s.io/jobset api/jobset/v1alpha2).
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"

# What the runtime sets in every pod: any of them without WORKERS_ENV is an error.
_RUNTIME_ENV = (NAME_ENV, REPLICATED_JOB_ENV, JOB_INDEX_ENV, PORT_ENV, SUBDOMAIN_ENV)

DEFAULT_PORT = 2222
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")


def _int(environ: Mapping[str, str], name: str, minimum: int, default: int | None = None) -> int:
    text = environ.get(name, "").strip()
    if not text and default is not None:
        return default
    if not re.fullmatch(r"\d+", text) or int(text) < minimum:
        raise ValueError(
            f"Invalid JobSet pod environment: `{name}` expected an int >= "
            f"{minimum}. Received: {name}={environ.get(name)!r}"
        )
    return int(text)


def _name(
    environ: Mapping[str, str], name: str, pattern: re.Pattern, default: str | None = None
) -> str:
    text = environ.get(name, "").strip() or default
    if not text or not pattern.match(text):
        raise ValueError(
            f"Invalid JobSet pod environment: `{name}` expected a DNS name (set "
            f"from the pod's JobSet labels by the tfdist-opt TensorFlow runtime). "
            f"Received: {name}={environ.get(name)!r}"
        )
    return text


def jobset_hosts(
    jobset: str,
    replicated_job: str,
    job_index: int,
    workers: int,
    subdomain: str | None = None,
    port: int = DEFAULT_PORT,
) -> list[str]:
    """The "host:port" of every pod of one Job of a JobSet, by pod index."""
    domain = subdomain or jobset
    return [f"{jobset}-{replicated_job}-{job_index}-{i}.{domain}:{port}" for i in range(workers)]


def tf_config_from_jobset(environ: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """This JobSet pod's TF_CONFIG, built from its index and JobSet's hostnames.

    Pure: reads `environ` only (see the module docstring for the variables).

    Args:
        environ: mapping or None. Defaults to `os.environ`.

    Returns:
        The validated TF_CONFIG dict; None when no `TFDIST_JOBSET_*`
        variable is set (not such a pod) or `TFDIST_JOBSET_WORKERS` is 1
        (one worker needs no cluster).

    Raises:
        ValueError: a variable missing or malformed (among them
            `TFDIST_JOBSET_WORKERS` unset in a pod with the runtime's other
            variables), or an index outside the workers, named with the
            value received.

    Example:
        >>> cfg = tf_config_from_jobset({
        ...     "TFDIST_JOBSET_WORKERS": "2", "JOB_COMPLETION_INDEX": "1",
        ...     "TFDIST_JOBSET_NAME": "mnist", "TFDIST_JOBSET_REPLICATED_JOB": "node",
        ...     "TFDIST_JOBSET_JOB_INDEX": "0", "TFDIST_JOBSET_PORT": "2222"})
        >>> cfg["cluster"]["worker"][1], cfg["task"]
        ('mnist-node-0-1.mnist:2222', {'type': 'worker', 'index': 1})
    """
    environ = os.environ if environ is None else environ
    if not environ.get(WORKERS_ENV, "").strip():
        present = sorted(k for k in _RUNTIME_ENV if environ.get(k, "").strip())
        if not present:
            return None
        raise ValueError(
            f"Invalid JobSet pod environment: `{WORKERS_ENV}` is not set, but "
            f"this pod has the TensorFlow runtime's variables ({', '.join(present)}), "
            "so every pod would train alone. Trainer gives the pods no node "
            f"count: set {WORKERS_ENV} in the TrainJob's trainer.env to its "
            "trainer.numNodes (from the Kubeflow SDK: in the trainer's env, beside "
            "num_nodes), as `tfdist-opt k8s --kind trainjob` writes. "
            f"Received: {WORKERS_ENV}={environ.get(WORKERS_ENV)!r}"
        )
    workers = _int(environ, WORKERS_ENV, 1)
    index = _int(environ, COMPLETION_INDEX_ENV, 0)
    if index >= workers:
        raise ValueError(
            f"Invalid JobSet pod environment: `{COMPLETION_INDEX_ENV}` expected "
            f"an index below {WORKERS_ENV}={workers} (the TrainJob's numNodes "
            f"and {WORKERS_ENV} must agree). Received: "
            f"{COMPLETION_INDEX_ENV}={environ.get(COMPLETION_INDEX_ENV)!r}"
        )
    jobset = _name(environ, NAME_ENV, _LABEL)
    replicated_job = _name(environ, REPLICATED_JOB_ENV, _LABEL)
    job_index = _int(environ, JOB_INDEX_ENV, 0, default=0)
    subdomain = _name(environ, SUBDOMAIN_ENV, _SUBDOMAIN, default=jobset)
    port = _int(environ, PORT_ENV, 1, default=DEFAULT_PORT)
    if port > 65535:
        raise ValueError(
            f"Invalid JobSet pod environment: `{PORT_ENV}` expected "
            f"a port in 1..65535. Received: {PORT_ENV}={port}"
        )
    if workers == 1:
        return None
    hosts = jobset_hosts(jobset, replicated_job, job_index, workers, subdomain, port)
    return tf_config_lib.build_tf_config({"worker": hosts}, "worker", index)


def apply_jobset_tf_config(
    environ: MutableMapping[str, str] | None = None,
) -> dict[str, Any] | None:
    """Sets TF_CONFIG from the JobSet variables when it is unset; idempotent.

    Args:
        environ: mutable mapping or None. Defaults to `os.environ`.

    Returns:
        The TF_CONFIG written, or None (TF_CONFIG already set, not a JobSet
        pod, or one worker).

    Raises:
        ValueError: as `tf_config_from_jobset`.
    """
    environ = os.environ if environ is None else environ
    if environ.get(tf_config_lib.TF_CONFIG_ENV, "").strip():
        return None
    cfg = tf_config_from_jobset(environ)
    if cfg is not None:
        tf_config_lib.apply_tf_config(cfg, environ)
    return cfg
