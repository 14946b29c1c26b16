"""Sharding arithmetic and policy decisions for input pipelines.

Pure Python: importing this module does not import TensorFlow, so every
decision here is tested in milliseconds. `tfdist_opt.data.pipeline` holds one
`ShardPlan` and turns it into tf.data operations.

Vocabulary (the same as `tf.distribute.InputContext`):

- a *worker* is one input pipeline (one per process under
  `MultiWorkerMirroredStrategy`, one in total under `MirroredStrategy`);
- a worker feeds `local_replicas` replicas, one per-replica batch each step;
- `global_batch = per_replica_batch * num_replicas`.

Policies:

- `FILE`: each worker reads whole files, file `k` going to worker
  `k % num_workers` (the order TF's own `AutoShardPolicy.FILE` uses). Chosen
  when there are at least as many files as workers.
- `DATA`: each worker reads every file and keeps element `j` when
  `j % num_workers == worker_index`. Correct for any number of files, but
  every worker pays for reading everything.
- `OFF`: the source is already per-worker (a user `dataset_fn`, or arrays
  sliced in memory).

Even steps: a collective step waits for every worker, so a worker with one
batch more than its peers hangs forever (tensorflow/tensorflow#49048,
#36846). `steps_per_epoch()` takes the smallest worker's count; with
`uneven="drop"` every worker stops there (the tail of a larger shard is
dropped, the count is logged), with `uneven="error"` unequal counts raise.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from tfdist_opt import validation

FILE = "FILE"
DATA = "DATA"
OFF = "OFF"
POLICIES = (FILE, DATA, OFF)
REQUESTS = ("auto", "file", "data", "off")
UNEVEN = ("drop", "error")


def per_replica_batch_size(global_batch_size: int, num_replicas: int) -> int:
    """The per-replica batch for a global batch, refusing a remainder.

    Args:
        global_batch_size: int. Examples per step over all replicas.
        num_replicas: int. Replicas in sync (all workers together).

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
        raise ValueError(
            f"Invalid value for `global_batch_size`: expected a multiple of "
            f"the number of replicas in sync ({num_replicas}). Received: "
            f"global_batch_size={global_batch_size}, num_replicas={num_replicas}"
            f". Use e.g. {hint}.")
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


def file_shard_sizes(examples_per_file: Sequence[int], num_workers: int
                     ) -> list[int]:
    """Examples per worker when file k goes to worker k % n.

    Example:
        >>> file_shard_sizes([5, 5, 2], 2)
        [7, 5]
    """
    _check_positive_int("num_workers", num_workers)
    return [sum(examples_per_file[i::num_workers]) for i in range(num_workers)]


@dataclasses.dataclass(frozen=True)
class ShardPlan:
    """How one epoch is split over workers, and how many steps it has.

    Attributes:
        policy: str. `FILE`, `DATA` or `OFF`.
        num_workers: int. Input pipelines.
        worker_index: int. This pipeline's index.
        local_replicas: int. Replicas this pipeline feeds.
        per_replica_batch: int. Examples per replica per step.
        shard_sizes: tuple of int or None. Examples per worker, if known.
        steps_per_epoch: int or None. Steps every worker runs per epoch.
        reason: str. Why this policy, for the log.
        files: tuple of str. This worker's files (FILE) or all files (DATA);
            empty for in-memory or `dataset_fn` sources.
    """

    policy: str
    num_workers: int
    worker_index: int
    local_replicas: int
    per_replica_batch: int
    shard_sizes: tuple[int, ...] | None
    steps_per_epoch: int | None
    reason: str
    files: tuple[str, ...] = ()

    @property
    def examples_per_step_per_worker(self) -> int:
        return self.per_replica_batch * self.local_replicas

    @property
    def examples_kept(self) -> int | None:
        """Examples this worker keeps per epoch (None: unknown)."""
        if self.steps_per_epoch is None:
            return None
        return self.steps_per_epoch * self.examples_per_step_per_worker

    @property
    def examples_dropped(self) -> int | None:
        """Examples dropped per epoch over all workers (None: unknown)."""
        if self.shard_sizes is None or self.examples_kept is None:
            return None
        return sum(self.shard_sizes) - self.examples_kept * self.num_workers

    def describe(self) -> str:
        steps = ("unknown" if self.steps_per_epoch is None
                 else str(self.steps_per_epoch))
        text = (f"sharding {self.policy} over {self.num_workers} worker(s) "
                f"({self.reason}); per-replica batch {self.per_replica_batch} "
                f"x {self.local_replicas} local replica(s); "
                f"steps per epoch: {steps}")
        if self.shard_sizes is not None:
            text += f"; examples per worker: {list(self.shard_sizes)}"
        dropped = self.examples_dropped
        if dropped:
            text += (f"; {dropped} example(s) dropped per epoch so every worker "
                     "runs the same number of steps")
        return text


def choose_policy(num_files: int | None, num_workers: int,
                  requested: str = "auto", per_worker: bool = False,
                  files: Sequence[str] | None = None) -> tuple[str, str]:
    """Decides FILE / DATA / OFF and says why.

    Args:
        num_files: int or None. Files in the source; None for sources that
            are not file-based (arrays, generators).
        num_workers: int. Input pipelines.
        requested: str. `"auto"`, `"file"`, `"data"` or `"off"`.
        per_worker: bool. The source is already split per worker.
        files: sequence of str or None. File names, only used to list the
            files each worker would read in the too-few-files error.

    Returns:
        `(policy, reason)`.

    Raises:
        ValueError: `requested="file"` with fewer files than workers (the
            message lists the files per worker), or `"file"` for a source
            without files, or an unknown request.
    """
    if requested not in REQUESTS:
        raise ValueError(
            f"Invalid value for `shard_policy`: expected one of "
            f"{', '.join(repr(r) for r in REQUESTS)}. "
            f"Received: shard_policy={requested!r}")
    _check_positive_int("num_workers", num_workers)
    if per_worker:
        if requested in ("file", "data"):
            raise ValueError(
                f"Invalid value for `shard_policy`: the source is already "
                f"per-worker (a dataset_fn), so it cannot be sharded again. "
                f"Received: shard_policy={requested!r}. Expected 'auto' or 'off'.")
        return OFF, "source is already per-worker"
    if requested == "off":
        if num_workers > 1:
            raise ValueError(
                "Invalid value for `shard_policy`: 'off' with "
                f"{num_workers} workers would feed every worker the whole "
                "dataset (each example seen num_workers times per epoch). "
                "Received: shard_policy='off'. Expected 'auto', 'file' or "
                "'data' (or a per-worker dataset_fn).")
        return OFF, "one worker"
    if num_workers == 1:
        return OFF, "one worker reads everything"
    if requested == "data":
        return DATA, "requested"
    if num_files is None:
        if requested == "file":
            raise ValueError(
                "Invalid value for `shard_policy`: 'file' needs a file-based "
                "source. Received: shard_policy='file' for an in-memory source. "
                "Expected 'auto' or 'data'.")
        return DATA, "source has no files"
    if num_files >= num_workers:
        return FILE, f"{num_files} file(s) >= {num_workers} worker(s)"
    if requested == "file":
        listing = "; ".join(
            f"worker {i}: {names if names else 'NO FILES'}"
            for i, names in enumerate(files_per_worker(
                list(files) if files is not None else
                [f"<file {k}>" for k in range(num_files)], num_workers)))
        raise ValueError(
            f"Invalid value for `shard_policy`: 'file' needs at least as many "
            f"files as workers. Received: {num_files} file(s) for "
            f"{num_workers} workers ({listing}). Expected shard_policy='auto' "
            f"or 'data', or at least {num_workers} files.")
    return DATA, (f"{num_files} file(s) < {num_workers} workers, so every "
                  "worker reads all files and keeps every "
                  f"{num_workers}th element")


def steps_per_epoch(shard_sizes: Sequence[int], per_replica_batch: int,
                    local_replicas: int = 1, uneven: str = "drop") -> int:
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
        raise ValueError("Invalid value for `shard_sizes`: expected at least "
                         "one worker. Received: shard_sizes=[]")
    per_step = per_replica_batch * local_replicas
    steps = [size // per_step for size in shard_sizes]
    if min(steps) == 0:
        raise ValueError(
            f"Not enough data for one step on every worker: examples per "
            f"worker {list(shard_sizes)}, {per_step} example(s) per worker per "
            f"step (per-replica batch {per_replica_batch} x {local_replicas} "
            "local replica(s)). Expected every worker to hold at least one "
            "step; use a smaller batch or more data.")
    if uneven == "error" and len(set(steps)) > 1:
        raise ValueError(
            f"Uneven shards: workers would run {steps} steps per epoch "
            f"(examples per worker {list(shard_sizes)}, {per_step} per step), "
            "and a worker with more steps would wait forever in a collective. "
            "Received: uneven='error'. Expected equal shards, or uneven='drop' "
            f"to run {min(steps)} steps on every worker.")
    return min(steps)


def plan_shards(*, num_workers: int, worker_index: int, num_replicas: int,
                global_batch_size: int, files: Sequence[str] | None = None,
                examples_per_file: Sequence[int] | None = None,
                num_examples: int | None = None,
                examples_per_worker: int | None = None,
                per_worker: bool = False, requested: str = "auto",
                uneven: str = "drop",
                data_shard_sizes_override: Sequence[int] | None = None
                ) -> ShardPlan:
    """The whole decision for one worker: policy, batch, steps.

    Args:
        num_workers: int. Input pipelines (`InputContext.num_input_pipelines`).
        worker_index: int. This pipeline (`InputContext.input_pipeline_id`).
        num_replicas: int. Replicas in sync over all workers.
        global_batch_size: int. Examples per step over all replicas.
        files: sequence of str or None. The source's files, sorted, the same
            list on every worker.
        examples_per_file: sequence of int or None. Records in each file.
        num_examples: int or None. Examples in a non-file source.
        examples_per_worker: int or None. For per-worker sources: the
            examples each worker holds, when the caller knows it.
        per_worker: bool. The source is already split per worker.
        requested: str. Shard policy request. Defaults to `"auto"`.
        uneven: str. `"drop"` or `"error"`. Defaults to `"drop"`.
        data_shard_sizes_override: sequence of int or None. Examples per
            worker under DATA sharding when the reader splits differently
            from `j % n` (TFDS `even_splits` gives contiguous ranges).

    Returns:
        A `ShardPlan`.

    Raises:
        ValueError: see `per_replica_batch_size`, `choose_policy`,
            `steps_per_epoch`.
    """
    per_replica = per_replica_batch_size(global_batch_size, num_replicas)
    _check_positive_int("num_workers", num_workers)
    if not 0 <= worker_index < num_workers:
        raise ValueError(
            f"Invalid value for `worker_index`: expected 0 <= worker_index < "
            f"{num_workers}. Received: worker_index={worker_index}")
    if num_replicas % num_workers:
        raise ValueError(
            f"Invalid value for `num_replicas`: expected a multiple of the "
            f"number of workers ({num_workers}). Received: "
            f"num_replicas={num_replicas}")
    local = num_replicas // num_workers
    files = tuple(files) if files is not None else None
    if files is not None and not files:
        raise ValueError("Invalid value for `files`: the file pattern matched "
                         "no files. Received: files=[]")
    policy, reason = choose_policy(None if files is None else len(files),
                                   num_workers, requested, per_worker, files)
    sizes: list[int] | None
    if per_worker:
        sizes = (None if examples_per_worker is None
                 else [examples_per_worker] * num_workers)
    elif files is not None:
        if examples_per_file is None:
            sizes = None
        elif len(examples_per_file) != len(files):
            raise ValueError(
                f"Invalid value for `examples_per_file`: expected one count "
                f"per file ({len(files)}). Received: {len(examples_per_file)} "
                "counts")
        elif policy == FILE:
            sizes = file_shard_sizes(examples_per_file, num_workers)
        elif policy == DATA and data_shard_sizes_override is not None:
            sizes = list(data_shard_sizes_override)
        else:
            sizes = data_shard_sizes(sum(examples_per_file), num_workers)
    elif num_examples is not None:
        sizes = (data_shard_sizes(num_examples, num_workers)
                 if policy != OFF else [num_examples])
    else:
        sizes = None
    steps = (None if sizes is None
             else steps_per_epoch(sizes, per_replica, local, uneven))
    mine: tuple[str, ...] = ()
    if files is not None:
        mine = (tuple(files_per_worker(files, num_workers)[worker_index])
                if policy == FILE else files)
    return ShardPlan(policy=policy, num_workers=num_workers,
                     worker_index=worker_index, local_replicas=local,
                     per_replica_batch=per_replica,
                     shard_sizes=None if sizes is None else tuple(sizes),
                     steps_per_epoch=steps, reason=reason, files=mine)


def shuffle_buffer_size(examples_per_worker: int | None, per_replica_batch: int,
                        cap: int = 10_000, streaming: bool = False) -> int:
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
      at most `cap` and the shard. (Measured on 2 cores, 64x64 JPEG records:
      a 4096-record buffer stalled 40-90 ms at every epoch start, 1024 about
      10-20 ms.)

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
