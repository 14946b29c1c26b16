"""One host's CPUs split between the training tasks that share it.

Each TensorFlow process sizes its intra-op and inter-op thread pools to
every CPU it may run on. When k chief/worker tasks of one cluster run on
the same host (`tfdist-opt launch -n k` on one machine, several tasks per
node), k processes then run k x (intra + inter) compute threads on the same
CPUs: Eigen's pools spin and preempt each other, and a step waits on
whichever worker the scheduler starved. Sized pools, and pinning, against
one process on the same cores are measured on the Benchmarks page
("Steadiness and cpu_split"), with and without other jobs on the host.

`plan()` is pure: from this process's CPU affinity, the machine's CPU count,
TF_CONFIG's cluster and this task, it decides

* `"auto"` (the default) and `"threads"`: no pinning; each task's pools
  sized to its share, max(1, cpus // k) threads;
* `"pin"`: when k > 1 tasks share this host and this process may run on
  every CPU of the machine (nobody pinned it: a `taskset`, SLURM
  `--cpu-bind` or a cgroup cpuset is left alone), task j of the k (cluster
  order: chief, then workers by index) is pinned to the j-th of k
  contiguous, equal slices of the CPUs (the remainder goes to the first
  slices) and its pools are sized to its slice. More tasks than CPUs: no
  pinning, pools of one thread;
* `"off"`: TF's defaults.

Same host: equal host names in the cluster addresses, every loopback name
(localhost, 127.0.0.0/8, ::1) counting as one. Pool sizes set by the user
(`TF_NUM_INTRAOP_THREADS`, `TF_NUM_INTEROP_THREADS`) are kept. The
inter-op pool never drops below 2 threads (a pool of one can deadlock
graphs whose ops block on each other).

`apply()` is the binding: `os.sched_setaffinity` on every thread of the
process, then `tf.config.threading`; it must run before TF's runtime
starts (`opt_strategy` calls it before building the multi-worker
strategy). A runtime already started keeps its pools (said once in the
log); the pinning still applies.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping, Sequence

from tfdist_opt import validation
from tfdist_opt.cluster import tf_config as tf_config_lib

MODES = ("auto", "threads", "pin", "off")
POOL_ENV = ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")
_TRAINING_ROLES = ("chief", "worker")


@dataclasses.dataclass(frozen=True)
class CpuSplit:
    """What `apply` does in this process.

    Attributes:
        cpus: tuple of int or None. CPUs to pin the process to; None: leave
            its affinity.
        intra_op: int or None. Intra-op pool size; None: TF's default.
        inter_op: int or None. Inter-op pool size; None: TF's default.
        reason: str. One line for the log.
    """

    cpus: tuple[int, ...] | None
    intra_op: int | None
    inter_op: int | None
    reason: str


def host_key(address: str) -> str:
    """The host part of "host:port", every loopback name as "loopback".

    Example:
        >>> host_key("127.0.0.1:2222") == host_key("localhost:2223")
        True
        >>> host_key("Node-1:2222")
        'node-1'
    """
    host, _ = tf_config_lib.split_address(address)
    return "loopback" if tf_config_lib.is_loopback_host(host) else host.lower()


def local_tasks(tf_config: Mapping[str, Any]) -> tuple[int, int]:
    """(training tasks on this task's host, this task's rank among them).

    Training tasks are the chief and the workers, in that order; a task
    of another role (ps, evaluator) counts 1 task and rank 0 (it is not
    split with the trainers).

    Example:
        >>> local_tasks({"cluster": {"worker": ["localhost:1", "127.0.0.1:2",
        ...                                     "h2:3"]},
        ...              "task": {"type": "worker", "index": 1}})
        (2, 1)
    """
    cluster, task = tf_config["cluster"], tf_config["task"]
    if task["type"] not in _TRAINING_ROLES:
        return 1, 0
    mine = host_key(cluster[task["type"]][task["index"]])
    same = [
        (role, i)
        for role in _TRAINING_ROLES
        for i, address in enumerate(cluster.get(role, []))
        if host_key(address) == mine
    ]
    return len(same), same.index((task["type"], task["index"]))


def plan(
    mode: str,
    affinity: Sequence[int] | None,
    machine_cpus: int | None,
    tasks: int,
    rank: int,
    environ: Mapping[str, str],
) -> CpuSplit:
    """Decides the split for one process (see the module docstring).

    Args:
        mode: str. `cpu_split`: "auto", "threads", "pin" or "off".
        affinity: the CPUs this process may run on, or None where the OS
            cannot tell (then nothing is pinned).
        machine_cpus: int or None. `os.cpu_count()`.
        tasks, rank: from `local_tasks`.
        environ: the environment (pool sizes the user set are kept).

    Returns:
        A `CpuSplit`.

    Example:
        >>> plan("pin", [0, 1], 2, 2, 1, {})
        CpuSplit(cpus=(1,), intra_op=1, inter_op=2, reason='pinned to CPUs [1]: task 2 of 2 on this host')
        >>> plan("auto", [0, 1], 2, 2, 1, {}).cpus is None
        True
    """
    validation.check_choice("cpu_split", mode, MODES)
    if mode == "off" or tasks <= 1 or not affinity:
        why = (
            "cpu_split='off'"
            if mode == "off"
            else "one training task on this host"
            if tasks <= 1
            else "CPU affinity unknown"
        )
        return CpuSplit(None, None, None, f"TF's thread pools ({why})")
    cpus = sorted(affinity)
    user_pools = [name for name in POOL_ENV if environ.get(name)]
    pinnable = (
        mode == "pin"
        and len(cpus) >= tasks
        and machine_cpus is not None
        and len(cpus) >= machine_cpus
    )
    if pinnable:
        mine = _slice(cpus, tasks, rank)
        size, pinned = len(mine), tuple(mine)
        reason = f"pinned to CPUs {list(mine)}: task {rank + 1} of {tasks} on this host"
    else:
        size, pinned = max(1, len(cpus) // tasks), None
        reason = (
            f"{tasks} tasks share {len(cpus)} CPU(s) on this host, "
            f"not pinned ({f'cpu_split={mode}' if mode != 'pin' else 'affinity already restricted or fewer CPUs than tasks'})"
        )
    intra = None if "TF_NUM_INTRAOP_THREADS" in user_pools else size
    inter = None if "TF_NUM_INTEROP_THREADS" in user_pools else max(2, size)
    if user_pools:
        reason += f"; pool sizes from {', '.join(user_pools)} kept"
    return CpuSplit(pinned, intra, inter, reason)


def _slice(cpus: Sequence[int], parts: int, index: int) -> list[int]:
    """The index-th of `parts` contiguous slices; the first ones get the remainder."""
    base, extra = divmod(len(cpus), parts)
    start = index * base + min(index, extra)
    return list(cpus[start : start + base + (1 if index < extra else 0)])


def detect(
    mode: str, tf_config: Mapping[str, Any] | None, environ: Mapping[str, str] | None = None
) -> CpuSplit:
    """`plan` for this process: its affinity, CPU count and TF_CONFIG."""
    environ = os.environ if environ is None else environ
    if tf_config is None:
        tasks, rank = 1, 0
    else:
        tasks, rank = local_tasks(tf_config)
    getter = getattr(os, "sched_getaffinity", None)
    affinity = sorted(getter(0)) if getter else None
    return plan(mode, affinity, os.cpu_count(), tasks, rank, environ)


def apply(split: CpuSplit) -> list[str]:
    """Pins every thread of this process and sizes TF's pools.

    Returns:
        list of str: what could not be applied (empty when all was).
    """
    missed = []
    if split.cpus is not None:
        tids = os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else ["0"]
        for tid in tids:
            try:
                os.sched_setaffinity(int(tid), split.cpus)
            except OSError:  # a thread that ended meanwhile
                pass
    if split.intra_op is None and split.inter_op is None:
        return missed
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    for size, setter, getter in (
        (
            split.intra_op,
            tf.config.threading.set_intra_op_parallelism_threads,
            tf.config.threading.get_intra_op_parallelism_threads,
        ),
        (
            split.inter_op,
            tf.config.threading.set_inter_op_parallelism_threads,
            tf.config.threading.get_inter_op_parallelism_threads,
        ),
    ):
        if size is None:
            continue
        try:
            setter(size)
        except RuntimeError:
            if getter() != size:
                missed.append(f"{setter.__name__}({size}): TF's runtime already started")
    return missed
