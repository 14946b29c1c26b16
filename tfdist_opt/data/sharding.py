"""Sharding policy decisions for input pipelines: FILE / DATA / OFF, and the
`ShardPlan` each worker follows.

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

Even steps (a worker with one batch more than its peers hangs in a
collective) and the other arithmetic live in `shard_math`; its public names
are re-exported here.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from tfdist_opt import validation
from tfdist_opt.data.shard_math import UNEVEN
from tfdist_opt.data.shard_math import data_shard_sizes
from tfdist_opt.data.shard_math import file_shard_sizes
from tfdist_opt.data.shard_math import files_per_worker
from tfdist_opt.data.shard_math import per_replica_batch_size
from tfdist_opt.data.shard_math import shuffle_buffer_size
from tfdist_opt.data.shard_math import steps_per_epoch

FILE = "FILE"
DATA = "DATA"
OFF = "OFF"
POLICIES = (FILE, DATA, OFF)
REQUESTS = ("auto", "file", "data", "off")

__all__ = [
    "DATA",
    "FILE",
    "OFF",
    "POLICIES",
    "REQUESTS",
    "UNEVEN",
    "ShardPlan",
    "choose_policy",
    "data_shard_sizes",
    "file_shard_sizes",
    "files_per_worker",
    "per_replica_batch_size",
    "plan_shards",
    "shuffle_buffer_size",
    "steps_per_epoch",
]


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
        steps = "unknown" if self.steps_per_epoch is None else str(self.steps_per_epoch)
        text = (
            f"sharding {self.policy} over {self.num_workers} worker(s) "
            f"({self.reason}); per-replica batch {self.per_replica_batch} "
            f"x {self.local_replicas} local replica(s); "
            f"steps per epoch: {steps}"
        )
        if self.shard_sizes is not None:
            text += f"; examples per worker: {list(self.shard_sizes)}"
        dropped = self.examples_dropped
        if dropped:
            text += (
                f"; {dropped} example(s) dropped per epoch so every worker "
                "runs the same number of steps"
            )
        return text


def choose_policy(
    num_files: int | None,
    num_workers: int,
    requested: str = "auto",
    per_worker: bool = False,
    files: Sequence[str] | None = None,
) -> tuple[str, str]:
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
            f"Received: shard_policy={requested!r}"
        )
    _check_positive_int("num_workers", num_workers)
    if per_worker:
        if requested in ("file", "data"):
            raise ValueError(
                f"Invalid value for `shard_policy`: the source is already "
                f"per-worker (a dataset_fn), so it cannot be sharded again. "
                f"Received: shard_policy={requested!r}. Expected 'auto' or 'off'."
            )
        return OFF, "source is already per-worker"
    if requested == "off":
        if num_workers > 1:
            raise ValueError(
                "Invalid value for `shard_policy`: 'off' with "
                f"{num_workers} workers would feed every worker the whole "
                "dataset (each example seen num_workers times per epoch). "
                "Received: shard_policy='off'. Expected 'auto', 'file' or "
                "'data' (or a per-worker dataset_fn)."
            )
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
                "Expected 'auto' or 'data'."
            )
        return DATA, "source has no files"
    if num_files >= num_workers:
        return FILE, f"{num_files} file(s) >= {num_workers} worker(s)"
    if requested == "file":
        listing = "; ".join(
            f"worker {i}: {names if names else 'NO FILES'}"
            for i, names in enumerate(
                files_per_worker(
                    list(files) if files is not None else [f"<file {k}>" for k in range(num_files)],
                    num_workers,
                )
            )
        )
        raise ValueError(
            f"Invalid value for `shard_policy`: 'file' needs at least as many "
            f"files as workers. Received: {num_files} file(s) for "
            f"{num_workers} workers ({listing}). Expected shard_policy='auto' "
            f"or 'data', or at least {num_workers} files."
        )
    return DATA, (
        f"{num_files} file(s) < {num_workers} workers, so every "
        "worker reads all files and keeps every "
        f"{num_workers}th element"
    )


def plan_shards(
    *,
    num_workers: int,
    worker_index: int,
    num_replicas: int,
    global_batch_size: int,
    files: Sequence[str] | None = None,
    examples_per_file: Sequence[int] | None = None,
    num_examples: int | None = None,
    examples_per_worker: int | None = None,
    per_worker: bool = False,
    requested: str = "auto",
    uneven: str = "drop",
    data_shard_sizes_override: Sequence[int] | None = None,
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
            f"{num_workers}. Received: worker_index={worker_index}"
        )
    if num_replicas % num_workers:
        raise ValueError(
            f"Invalid value for `num_replicas`: expected a multiple of the "
            f"number of workers ({num_workers}). Received: "
            f"num_replicas={num_replicas}"
        )
    local = num_replicas // num_workers
    files = tuple(files) if files is not None else None
    if files is not None and not files:
        raise ValueError(
            "Invalid value for `files`: the file pattern matched no files. Received: files=[]"
        )
    policy, reason = choose_policy(
        None if files is None else len(files), num_workers, requested, per_worker, files
    )
    sizes: list[int] | None
    if per_worker:
        sizes = None if examples_per_worker is None else [examples_per_worker] * num_workers
    elif files is not None:
        if examples_per_file is None:
            sizes = None
        elif len(examples_per_file) != len(files):
            raise ValueError(
                f"Invalid value for `examples_per_file`: expected one count "
                f"per file ({len(files)}). Received: {len(examples_per_file)} "
                "counts"
            )
        elif policy == FILE:
            sizes = file_shard_sizes(examples_per_file, num_workers)
        elif policy == DATA and data_shard_sizes_override is not None:
            sizes = list(data_shard_sizes_override)
        else:
            sizes = data_shard_sizes(sum(examples_per_file), num_workers)
    elif num_examples is not None:
        sizes = data_shard_sizes(num_examples, num_workers) if policy != OFF else [num_examples]
    else:
        sizes = None
    steps = None if sizes is None else steps_per_epoch(sizes, per_replica, local, uneven)
    mine: tuple[str, ...] = ()
    if files is not None:
        mine = (
            tuple(files_per_worker(files, num_workers)[worker_index]) if policy == FILE else files
        )
    return ShardPlan(
        policy=policy,
        num_workers=num_workers,
        worker_index=worker_index,
        local_replicas=local,
        per_replica_batch=per_replica,
        shard_sizes=None if sizes is None else tuple(sizes),
        steps_per_epoch=steps,
        reason=reason,
        files=mine,
    )


def _check_positive_int(name: str, value) -> None:
    validation.check_int(name, value, minimum=1)
