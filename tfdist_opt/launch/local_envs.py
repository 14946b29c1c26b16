"""Pure: the environment of each local task (TF_CONFIG, the launch's names).

What `run_local` hands each task of one attempt: TF_CONFIG for its role,
the restart count, its index, and the GPUs and variables the `Layout`
decided. Nothing here starts a process.
"""

from __future__ import annotations

import os
from typing import Mapping, Sequence

from tfdist_opt.cluster import sources
from tfdist_opt.cluster import tf_config as tf_config_lib
from tfdist_opt.cluster.ports import check_ports_free
from tfdist_opt.coordination.task_env import CPU_REPLICAS_ENV
from tfdist_opt.coordination.task_env import NUM_WORKERS_ENV
from tfdist_opt.coordination.task_env import RESTART_COUNT_ENV
from tfdist_opt.coordination.task_env import TRAINING_ENDED_ENV
from tfdist_opt.coordination.task_env import WORKER_INDEX_ENV
from tfdist_opt.launch import layout as layout_lib


def local_cluster(num_workers: int, base_port: int | None = None) -> list[str]:
    """Loopback worker addresses: free ports, or base_port, base_port+1, ..."""
    ports = None if base_port is None else [base_port + i for i in range(num_workers)]
    return sources.local_addresses(num_workers, "localhost", ports)


def worker_env(
    base_env: Mapping[str, str],
    index: int,
    addresses: Sequence[str],
    restart_count: int = 0,
    cpu_replicas: int | None = None,
    evaluator: str | None = None,
) -> dict[str, str]:
    """Pure: the environment of local worker `index` (TF_CONFIG if N > 1).

    With `evaluator` (its address), TF_CONFIG also names the side-car
    `evaluator` task.
    """
    env = dict(base_env)
    n = len(addresses)
    cluster = _with_evaluator({"worker": list(addresses)}, evaluator)
    cfg = tf_config_lib.build_tf_config(cluster, "worker", index) if n > 1 else None
    tf_config_lib.apply_tf_config(cfg, env)
    env[RESTART_COUNT_ENV] = str(restart_count)
    env[WORKER_INDEX_ENV] = str(index)
    env[NUM_WORKERS_ENV] = str(n)
    env.setdefault("PYTHONUNBUFFERED", "1")
    if cpu_replicas is not None:
        env[CPU_REPLICAS_ENV] = str(cpu_replicas)
    return env


def evaluator_env(
    base_env: Mapping[str, str],
    address: str,
    training: Mapping[str, Sequence[str]],
    restart_count: int = 0,
) -> dict[str, str]:
    """Pure: the environment of the side-car `evaluator` task.

    Args:
        address: str. The evaluator's address (TF_CONFIG needs one; the
            side-car evaluator starts no server on it).
        training: mapping. The training cluster (roles to addresses).
    """
    env = dict(base_env)
    cluster = _with_evaluator(training, address)
    tf_config_lib.apply_tf_config(tf_config_lib.build_tf_config(cluster, "evaluator", 0), env)
    env[RESTART_COUNT_ENV] = str(restart_count)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def _with_evaluator(cluster, evaluator):
    cluster = {r: list(v) for r, v in cluster.items()}
    if evaluator is not None:
        cluster["evaluator"] = [evaluator]
    return cluster


def ps_task_envs(
    base_env: Mapping[str, str],
    num_workers: int,
    num_ps: int,
    addresses: Sequence[str],
    restart_count: int = 0,
    evaluator: str | None = None,
) -> tuple[list[dict[str, str]], list[str]]:
    """Pure: environments and labels of a local parameter-server cluster.

    `addresses` holds 1 + num_workers + num_ps addresses: the chief, the
    workers, then the ps tasks, started in that order. With `evaluator`
    (its address), the side-car `evaluator` task comes last.
    """
    cluster = _with_evaluator(
        {
            "chief": list(addresses[:1]),
            "worker": list(addresses[1 : 1 + num_workers]),
            "ps": list(addresses[1 + num_workers :]),
        },
        evaluator,
    )
    envs, labels = [], []
    for task_type, task_index in tf_config_lib.all_tasks(cluster):
        env = dict(base_env)
        tf_config_lib.apply_tf_config(
            tf_config_lib.build_tf_config(cluster, task_type, task_index), env
        )
        env[RESTART_COUNT_ENV] = str(restart_count)
        env.setdefault("PYTHONUNBUFFERED", "1")
        envs.append(env)
        labels.append(f"{task_type} {task_index}")
    return envs, labels


def attempt_envs(
    layout: layout_lib.Layout,
    base_env: Mapping[str, str],
    base_port: int | None,
    cpu_replicas: int | None,
    restarts: int,
    scratch=None,
):
    """One attempt's (envs, labels, ports to wait for, where) on fresh ports.

    Ports are picked again for every attempt (a restarted group must not
    wait for the old one's sockets). `scratch()` gives a directory for the
    evaluator's training-ended file.
    """
    num_ps = layout.count("ps")
    num_workers = layout.count("worker")
    ev = 1 if layout.has_evaluator else 0
    labels = None
    if num_ps:
        n_train = 1 + num_workers + num_ps
        addresses = local_cluster(n_train + ev, base_port)
        ev_address = addresses[n_train] if ev else None
        addresses = addresses[:n_train]
        ports = [int(tf_config_lib.split_address(a)[1]) for a in addresses]
        envs, labels = ps_task_envs(base_env, num_workers, num_ps, addresses, restarts, ev_address)
        check_ports_free(list(zip(labels, ports)))
        where = f"(chief, workers, ps) on {', '.join(addresses)}"
    elif num_workers > 1:
        addresses = local_cluster(num_workers + ev, base_port)
        ev_address = addresses[num_workers] if ev else None
        addresses = addresses[:num_workers]
        ports = [int(tf_config_lib.split_address(a)[1]) for a in addresses]
        check_ports_free([(f"worker {i}", p) for i, p in enumerate(ports)])
        where = f"on {', '.join(addresses)}"
    else:  # one process: no cluster, no TF_CONFIG, no port
        addresses, ports, where = ["localhost:0"], [], "without TF_CONFIG"
        ev_address = None
    if not num_ps:
        envs = [
            worker_env(base_env, i, addresses, restarts, cpu_replicas, ev_address)
            for i in range(num_workers)
        ]
        if ev:
            envs.append(evaluator_env(base_env, ev_address, {"worker": addresses}, restarts))
            labels = [f"worker {i}" for i in range(num_workers)] + ["evaluator 0"]
    for task, task_env in zip(layout.tasks, envs):
        task_env.update(layout.env)
        task.apply_gpus(task_env)
    if ev:  # started last; runs no TF server, so not waited for
        where += f" + evaluator ({ev_address})"
        envs[-1][TRAINING_ENDED_ENV] = os.path.join(scratch(), f"training-ended.{restarts}")
    if layout.gpu_note:
        where += f"; {layout.gpu_note}"
    if layout.env:
        where += f"; setting {', '.join(sorted(layout.env))} (--env)"
    return envs, labels, ports, where
