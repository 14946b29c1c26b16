"""Sharding arithmetic: the per-replica batch, examples per worker, even
steps, the shuffle buffer. Pure Python.

The numbers `tfdist_opt.data.sharding.plan_shards` combines into a
`ShardPlan`; `sharding` re-exports every public name here.

Even steps: a collective step waits for every worker, so a worker with one
batch more than its peers hangs forever (tensorflow/tensorflow#49048,
#36846). `steps_per_epoch()` takes the smallest worker's count; with
`uneven="drop"` every worker stops there (the tail of a larger shard is
dropped, the count is logged), with `uneven="error"` unequal counts raise.
"""

from __future__ import annotations

from typing import Sequence

from tfdist_opt import validation

UNEVEN = ("drop", "error")


def per_replica_batch_size(
    global_batch_size: int,
    num_replicas: int,
    num_workers: int | None = None,
    where: str | None = None,
) -> int:
    """The per-replica batch for a global batch, refusing a remainder.

    Args:
        global_batch_size: int. Examples per step over all replicas.
        num_replicas: int. Replicas in sync (all workers together).
        num_workers: int or None. Workers the replicas run on, named in the
            error when given. Defaults to `None`.
        where: str or None. Where the global batch comes from, named in the
            error when given. Defaults to `None`.

    Returns:
        `global_batch_size // num_replicas`.

    Raises:
        ValueError: either number is not a positive int, or the global batch
            is not divisible by the replica count (the message names both).

    Example:
        >>> per_replica_batch_size(64, 4)
        16
    """
    _check_positive_int("global_batch_size", global_batch_size)
    _check_positive_int("num_replicas", num_replicas)
    if global_batch_size % num_replicas:
        lower = global_batch_size - global_batch_size % num_replicas
        upper = lower + num_replicas
        hint = f"{lower} or {upper}" if lower else f"{upper}"
        source = f" ({where})" if where else ""
        workers = "" if num_workers is None else f", num_workers={num_workers}"
        raise ValueError(
            f"Invalid value for `global_batch_size`: expected a multiple of "
            f"the number of replicas in sync ({num_replicas}), so that every "
            "replica gets the same number of examples and each example "
            "weighs the same in the step. Received: "
            f"global_batch_size={global_batch_size}{source}, num_replicas="
            f"{num_replicas}{workers}. Use e.g. {hint}."
        )
    return global_batch_size // num_replicas


def files_per_worker(files: Sequence[str], num_workers: int) -> list[list[str]]:
    """Round-robin assignment of files to workers (file k -> worker k % n).

    Example:
        >>> files_per_worker(["a", "b", "c"], 2)
        [['a', 'c'], ['b']]
    """
    _check_positive_int("num_workers", num_workers)
    return [list(files[i::num_workers]) for i in range(num_workers)]


def data_shard_sizes(num_examples: int, num_workers: int) -> list[int]:
    """Examples per worker when element j goes to worker j % n.

    Example:
        >>> data_shard_sizes(10, 3)
        [4, 3, 3]
    """
    _check_non_negative_int("num_examples", num_examples)
    _check_positive_int("num_workers", num_workers)
    return [len(range(i, num_examples, num_workers)) for i in range(num_workers)]


def file_shard_sizes(examples_per_file: Sequence[int], num_workers: int) -> list[int]:
    """Examples per worker when file k goes to worker k % n.

    Example:
        >>> file_shard_sizes([5, 5, 2], 2)
        [7, 5]
    """
    _check_positive_int("num_workers", num_workers)
    return [sum(examples_per_file[i::num_workers]) for i in range(num_workers)]


def steps_per_epoch(
    shard_sizes: Sequence[int],
    per_replica_batch: int,
    local_replicas: int = 1,
    uneven: str = "drop",
) -> int:
    """Steps every worker can run in one epoch with full batches.

    A worker runs `size // (per_replica_batch * local_replicas)` full steps;
    the epoch has the smallest of these on every worker.

    Args:
        shard_sizes: sequence of int. Examples per worker.
        per_replica_batch: int. Examples per replica per step.
        local_replicas: int. Replicas per worker. Defaults to `1`.
        uneven: str. `"drop"` (every worker stops at the smallest count) or
            `"error"` (unequal counts raise). Defaults to `"drop"`.

    Returns:
        The number of steps.

    Raises:
        ValueError: a worker would have no full step, or `uneven="error"` and
            workers would run different numbers of steps.

    Example:
        >>> steps_per_epoch([7, 5], per_replica_batch=2)
        2
    """
    _check_choice("uneven", uneven, UNEVEN)
    _check_positive_int("per_replica_batch", per_replica_batch)
    _check_positive_int("local_replicas", local_replicas)
    if not shard_sizes:
        raise ValueError(
            "Invalid value for `shard_sizes`: expected at least "
            "one worker. Received: shard_sizes=[]"
        )
    per_step = per_replica_batch * local_replicas
    steps = [size // per_step for size in shard_sizes]
    if min(steps) == 0:
        raise ValueError(
            f"Not enough data for one step on every worker: examples per "
            f"worker {list(shard_sizes)}, {per_step} example(s) per worker per "
            f"step (per-replica batch {per_replica_batch} x {local_replicas} "
            "local replica(s)). Expected every worker to hold at least one "
            "step; use a smaller batch or more data."
        )
    if uneven == "error" and len(set(steps)) > 1:
        raise ValueError(
            f"Uneven shards: workers would run {steps} steps per epoch "
            f"(examples per worker {list(shard_sizes)}, {per_step} per step), "
            "and a worker with more steps would wait forever in a collective. "
            "Received: uneven='error'. Expected equal shards, or uneven='drop' "
            f"to run {min(steps)} steps on every worker."
        )
    return min(steps)


def shuffle_buffer_size(
    examples_per_worker: int | None,
    per_replica_batch: int,
    cap: int = 10_000,
    streaming: bool = False,
) -> int:
    """A sane shuffle buffer for one worker.

    A shuffle buffer fills completely before the first element of every
    epoch, so its size is a trade between shuffle quality and a stall at each
    epoch start.

    - In-memory or cached sources (`streaming=False`): filling costs no I/O,
      so the whole shard when it has at most `max(cap, 16 * per_replica_batch)`
      examples (a perfect shuffle), else that bound.
    - File sources read each epoch (`streaming=True`): file order is already
      reshuffled every epoch and the interleave mixes files, so the buffer
      only breaks up runs inside files: `max(1024, 8 * per_replica_batch)`,
      at most `cap` and the shard: a streamed buffer is refilled from the
      files at every epoch start, so a larger one stalls each epoch longer
      for no better mixing.

    Elements are shuffled before `map_fn` decodes them, so `cap` serialized
    records cost roughly `cap` x record size bytes.

    Example:
        >>> shuffle_buffer_size(500, 32)
        500
        >>> shuffle_buffer_size(None, 32)
        10000
        >>> shuffle_buffer_size(4096, 64, streaming=True)
        1024
    """
    _check_positive_int("per_replica_batch", per_replica_batch)
    _check_positive_int("cap", cap)
    if streaming:
        bounded = min(cap, max(1024, 8 * per_replica_batch))
    else:
        bounded = max(cap, 16 * per_replica_batch)
    if examples_per_worker is not None and examples_per_worker <= bounded:
        return max(1, examples_per_worker)
    return bounded


def _check_positive_int(name: str, value) -> None:
    validation.check_int(name, value, minimum=1)


def _check_non_negative_int(name: str, value) -> None:
    validation.check_int(name, value, minimum=0)


_check_choice = validation.check_choice
