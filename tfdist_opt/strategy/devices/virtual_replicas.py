"""A replica count that stays fixed when the worker count changes.

`StrategyConfig(replicas=R)` makes every run of a script train R replicas
in sync, whatever the number of workers W it runs on: each worker runs
R / W replicas, one per logical CPU device. A run resumed at another size
(`tfdist-opt launch --ray -n MIN:MAX`, Ray's elastic mode) is then the same
R-replica computation: the same per-replica batch (global batch / R), the
same examples per replica, and per-replica optimizer state (PowerSGD's
error feedback, ZeRO-1 shards, `grad_accum` accumulators) of the same
count, restored replica for replica. The cost: with W < R each worker
computes R / W replicas' share of every step on its own cores.

Which examples a replica gets. TF's multi-worker input splits each global
batch into R per-replica batches and deals them to the workers in turn
(`tf.data` DATA auto-sharding after rebatching): the replica with local
index l on worker w (global replica id w * L + l, L = R / W) gets the
per-replica batch l * W + w (its *data slot*). On one worker the slot is
the replica id; with W = R it is too. Per-replica state follows the data
slot across a resize (`data_slot`, used by
`tfdist_opt.gradients.binding.replica_slots`), so each slot's examples meet the
same error feedback as in the uninterrupted run.

Pure Python: no TensorFlow import.
"""

from __future__ import annotations

FIELD = "replicas"
# Kinds that keep R replicas in sync: one worker (mirrored over R logical
# CPUs, or one device when R == 1) and multi-worker (R / W logical CPUs each).
_KINDS = ("one_device", "mirrored", "multi_worker")


def local_replicas(replicas: int | None, num_workers: int, num_gpus: int, kind: str) -> int | None:
    """The replicas each worker runs for `replicas=R` on `num_workers` workers.

    Args:
        replicas: int or None. `StrategyConfig.replicas`; None: off.
        num_workers: int. Training workers (chief + workers) taking part.
        num_gpus: int. GPUs this host shows TensorFlow.
        kind: str. The strategy kind chosen (`"mirrored"`, ...).

    Returns:
        R / W, or None when `replicas` is None.

    Raises:
        ValueError: R is not a multiple of W, the host has GPUs (the
            replicas are logical CPU devices), or the kind runs no
            replicas in sync (parameter servers).

    Example:
        >>> local_replicas(4, 2, 0, "multi_worker")
        2
    """
    if replicas is None:
        return None
    if kind not in _KINDS:
        raise ValueError(
            f"Invalid value for `{FIELD}` with a {kind} strategy: it keeps no "
            "replicas in sync (workers train asynchronously against parameter "
            f"servers). Received: {FIELD}={replicas!r}. Expected {FIELD}=None, "
            "or mode 'auto', 'mirrored' or 'multi_worker'."
        )
    if num_gpus:
        raise ValueError(
            f"Invalid value for `{FIELD}` on a host with {num_gpus} GPU(s): the "
            "fixed replica count runs its replicas on logical CPU devices, and "
            f"a GPU replica cannot be split that way. Received: {FIELD}="
            f"{replicas!r}. Expected {FIELD}=None (one replica per GPU), or "
            "hide the GPUs (CUDA_VISIBLE_DEVICES='')."
        )
    if replicas % num_workers:
        raise ValueError(
            f"Invalid value for `{FIELD}` on {num_workers} worker(s): every "
            f"worker must run the same number of the {replicas} replicas, so "
            f"{FIELD} must be a multiple of the worker count. Received: "
            f"{FIELD}={replicas!r}, workers={num_workers}. Expected a multiple "
            f"of {num_workers} (e.g. {FIELD}={num_workers * max(1, replicas // num_workers)}), "
            "or run on a worker count that divides it."
        )
    return replicas // num_workers


def data_slot(replica_id: int, num_workers: int, local: int) -> int:
    """The per-replica batch of each global batch that `replica_id` trains on.

    Args:
        replica_id: int. Global replica id (`replica_id_in_sync_group`):
            worker index * `local` + local index.
        num_workers: int. Workers W.
        local: int. Replicas per worker L.

    Returns:
        The index, in [0, W * L), of the slice of the global batch it gets:
        local index * W + worker index.

    Example:
        >>> [data_slot(r, 2, 2) for r in range(4)]
        [0, 2, 1, 3]
    """
    worker, index = divmod(replica_id, local)
    return index * num_workers + worker
