"""`build_dataset()`: a source + a strategy -> what `model.fit` consumes.

The tf.data binding of `tfdist_opt.data.sharding`. For each input pipeline
(one per worker) it plans sharding, per-replica batch and steps per epoch
with the pure functions there, then builds:

    files -> [FILE: this worker's files, shuffled per epoch]
          -> parallel interleave of readers
          -> [DATA: keep every n-th element, deterministic order]
          -> take(examples for equal steps on every worker)
          -> [map_fn -> cache]            (when caching)
          -> shuffle (seeded, reshuffled per epoch, sane buffer)
          -> parallel map(map_fn, augment_fn), AUTOTUNE
          -> batch(per-replica batch, drop_remainder=True)
          -> prefetch(AUTOTUNE) -> tf.data.Options

and hands the function to `strategy.distribute_datasets_from_function`, with
per-replica device prefetch where a GPU exists. Sharding is done here,
explicitly, so each dataset carries `AutoShardPolicy.OFF` and TF never
tries (and warns about) auto-sharding it.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import tensorflow as tf

from tfdist_opt import _logging
from tfdist_opt.data import sharding
from tfdist_opt.data import sources as sources_lib
from tfdist_opt.data import tfds_source
from tfdist_opt.data import tfrecord_source
from tfdist_opt.data.tfrecord_source import count_records  # noqa: F401  (re-exported)
from tfdist_opt.data.tfrecord_source import resolve_files  # noqa: F401  (re-exported)
from tfdist_opt.data.options import AUTO
from tfdist_opt.data.options import AUTOTUNE
from tfdist_opt.data.options import PipelineOptions


@dataclasses.dataclass
class DistributedInput:
    """What `build_input()` returns.

    Attributes:
        dataset: `tf.distribute.DistributedDataset`. Pass it to `model.fit`.
        plans: list of `ShardPlan`, one per input pipeline of this process.
        steps_per_epoch: int or None. Steps per epoch, equal on every worker
            (None when a `dataset_fn` source gives no size).
    """

    dataset: Any
    plans: list[sharding.ShardPlan]

    @property
    def steps_per_epoch(self) -> int | None:
        return self.plans[0].steps_per_epoch if self.plans else None


def build_dataset(
    source: Any,
    strategy: tf.distribute.Strategy,
    global_batch_size: int,
    *,
    map_fn: Callable[..., Any] | None = None,
    augment_fn: Callable[..., Any] | None = None,
    options: PipelineOptions | None = None,
) -> Any:
    """Builds a sharded, batched, prefetched distributed dataset.

    Args:
        source: a TFRecord file pattern (str or list), numpy array(s), a
            `dataset_fn(input_context)`, or a `TFRecordSource`, `TFDSSource`,
            `ArraySource` or `DatasetFnSource`.
        strategy: `tf.distribute.Strategy`. Usually from `opt_strategy()`.
        global_batch_size: int. Examples per step over all replicas; each
            replica gets `global_batch_size // num_replicas_in_sync`.
        map_fn: callable or None. Deterministic per-example transform
            (parse, decode); runs before the cache. Defaults to `None`.
        augment_fn: callable or None. Random per-example transform (crop,
            flip); runs after the cache and shuffle. Defaults to `None`.
        options: `PipelineOptions` or None. Defaults to `PipelineOptions()`.

    Returns:
        A `tf.distribute.DistributedDataset`; every worker yields the same
        number of steps per epoch.

    Raises:
        ValueError: the global batch is not divisible by the replica count
            (names both), FILE sharding was demanded with too few files,
            a worker would get no full step, or shards are uneven and
            `options.uneven="error"`.
        FileNotFoundError: a TFDS dataset is not prepared and download=False.
        TypeError: an unrecognized source.

    Example:
        >>> strategy = tfdist_opt.opt_strategy(cpu_replicas=2)  # doctest: +SKIP
        >>> ds = build_dataset((x, y), strategy, global_batch_size=64)
        >>> model.fit(ds, epochs=3)
    """
    return build_input(
        source, strategy, global_batch_size, map_fn=map_fn, augment_fn=augment_fn, options=options
    ).dataset


def build_input(
    source: Any,
    strategy: tf.distribute.Strategy,
    global_batch_size: int,
    *,
    map_fn: Callable[..., Any] | None = None,
    augment_fn: Callable[..., Any] | None = None,
    options: PipelineOptions | None = None,
) -> DistributedInput:
    """`build_dataset()`, also returning the shard plans and steps per epoch."""
    options = PipelineOptions() if options is None else options
    if not isinstance(options, PipelineOptions):
        raise TypeError(
            "Invalid value for `options`: expected PipelineOptions. "
            f"Received: {type(options).__name__}"
        )
    source = sources_lib.as_source(source)
    # Checked here, before any pipeline is built, with both numbers named.
    sharding.per_replica_batch_size(global_batch_size, strategy.num_replicas_in_sync)
    plans: list[sharding.ShardPlan] = []
    fn = make_dataset_fn(
        source,
        global_batch_size,
        map_fn=map_fn,
        augment_fn=augment_fn,
        options=options,
        plans=plans,
    )
    input_options = _input_options(options)
    dataset = strategy.distribute_datasets_from_function(fn, options=input_options)
    if isinstance(strategy, tf.distribute.ParameterServerStrategy):
        # Not built here: TF builds it on each worker, and
        # tfdist_opt.parameter_server repeats `fn` there (parameter_server/data.py).
        dataset._tfdist_dataset_fn = (fn, input_options)  # pylint: disable=protected-access
    _fix_cardinality(dataset, plans)
    return DistributedInput(dataset=dataset, plans=plans)


def make_dataset_fn(
    source: Any,
    global_batch_size: int,
    *,
    map_fn: Callable[..., Any] | None = None,
    augment_fn: Callable[..., Any] | None = None,
    options: PipelineOptions | None = None,
    plans: list[sharding.ShardPlan] | None = None,
) -> Callable[[tf.distribute.InputContext], tf.data.Dataset]:
    """The per-worker `dataset_fn(input_context)` `build_dataset` distributes.

    Useful on its own with `strategy.distribute_datasets_from_function` or,
    with `tf.distribute.InputContext()`, to get one worker's plain dataset.
    Each call appends its `ShardPlan` to `plans` when given.
    """
    options = PipelineOptions() if options is None else options
    source = sources_lib.as_source(source)

    def dataset_fn(input_context: tf.distribute.InputContext) -> tf.data.Dataset:
        ds, shard_plan = worker_dataset(
            source,
            input_context,
            global_batch_size,
            map_fn=map_fn,
            augment_fn=augment_fn,
            options=options,
        )
        if plans is not None:
            plans.append(shard_plan)
        return ds

    return dataset_fn


def worker_dataset(
    source: Any,
    input_context: tf.distribute.InputContext,
    global_batch_size: int,
    *,
    map_fn: Callable[..., Any] | None = None,
    augment_fn: Callable[..., Any] | None = None,
    options: PipelineOptions | None = None,
) -> tuple[tf.data.Dataset, sharding.ShardPlan]:
    """One input pipeline's batched dataset and the plan it follows."""
    options = PipelineOptions() if options is None else options
    source = sources_lib.as_source(source)
    ctx = input_context
    sharding.per_replica_batch_size(global_batch_size, ctx.num_replicas_in_sync)
    common = {
        "num_workers": ctx.num_input_pipelines,
        "worker_index": ctx.input_pipeline_id,
        "num_replicas": ctx.num_replicas_in_sync,
        "global_batch_size": global_batch_size,
        "requested": options.shard_policy,
        "uneven": options.uneven,
    }
    if isinstance(source, sources_lib.TFRecordSource):
        files = resolve_files(source.pattern)
        counts = source.examples_per_file or count_records(files, source.compression_type)
        shard_plan = sharding.plan_shards(files=files, examples_per_file=counts, **common)
        ds = tfrecord_source.read(shard_plan, source, options, dict(zip(files, counts)))
    elif isinstance(source, sources_lib.ArraySource):
        shard_plan = sharding.plan_shards(num_examples=source.num_examples, **common)
        rows = (
            source.rows(ctx.input_pipeline_id, ctx.num_input_pipelines)
            if shard_plan.policy == sharding.DATA
            else source.arrays
        )
        ds = tf.data.Dataset.from_tensor_slices(rows)
    elif isinstance(source, sources_lib.TFDSSource):
        builder = tfds_source.load_builder(source)
        shard_plan = tfds_source.plan(builder, source, ctx, global_batch_size, options)
        ds = tfds_source.read(builder, source, shard_plan, ctx, options)
    else:  # DatasetFnSource
        shard_plan = sharding.plan_shards(
            per_worker=True, examples_per_worker=source.examples_per_worker, **common
        )
        ds = source.fn(ctx)
        if not isinstance(ds, tf.data.Dataset):
            raise TypeError(
                "Invalid return value of `dataset_fn`: expected a "
                f"tf.data.Dataset. Received: {type(ds).__name__}"
            )
    # `get_per_replica_batch_size` is TF's own arithmetic; ours must agree.
    assert ctx.get_per_replica_batch_size(global_batch_size) == shard_plan.per_replica_batch
    _logging.log_once(f"tfdist_opt.data: worker {shard_plan.worker_index}: {shard_plan.describe()}")
    if shard_plan.steps_per_epoch is None and shard_plan.num_workers > 1:
        _logging.log_once(
            "tfdist_opt.data: the dataset_fn source gives no size, so "
            "equal steps per epoch on every worker cannot be enforced; "
            "pass DatasetFnSource(fn, examples_per_worker=N) or "
            "steps_per_epoch to fit.",
            warning=True,
        )
    return _finish(ds, shard_plan, map_fn, augment_fn, options), shard_plan


def _finish(
    ds: tf.data.Dataset,
    shard_plan: sharding.ShardPlan,
    map_fn,
    augment_fn,
    options: PipelineOptions,
) -> tf.data.Dataset:
    parallel = _autotune(options.num_parallel_calls)
    kept = shard_plan.examples_kept
    if kept is not None:
        ds = ds.take(kept)  # equal steps on every worker (ShardPlan.describe)
    if options.cache_kind != "none":
        if map_fn is not None:
            ds = ds.map(map_fn, num_parallel_calls=parallel)
            map_fn = None
        ds = ds.cache(
            ""
            if options.cache_kind == "memory"
            else f"{options.cache}_worker{shard_plan.worker_index}"
        )
    if options.shuffle:
        buffer = (
            options.shuffle_buffer
            if isinstance(options.shuffle_buffer, int)
            else sharding.shuffle_buffer_size(
                kept,
                shard_plan.per_replica_batch,
                streaming=bool(shard_plan.files) and options.cache_kind == "none",
            )
        )
        ds = ds.shuffle(
            buffer, seed=options.seed, reshuffle_each_iteration=options.reshuffle_each_iteration
        )
    fn = _compose(map_fn, augment_fn)
    if fn is not None:
        ds = ds.map(fn, num_parallel_calls=parallel)
    ds = ds.batch(shard_plan.per_replica_batch, drop_remainder=True)
    if kept is not None:  # per-replica batches this worker yields
        ds = ds.apply(
            tf.data.experimental.assert_cardinality(
                shard_plan.steps_per_epoch * shard_plan.local_replicas
            )
        )
    if options.prefetch != 0:
        ds = ds.prefetch(_autotune(options.prefetch))
    return ds.with_options(dataset_options(options))


def _fix_cardinality(dataset: Any, plans: list[sharding.ShardPlan]) -> None:
    """Makes the distributed dataset report steps, not per-replica batches.

    TF's `DistributedDatasetsFromFunction.cardinality` is the first worker
    dataset's cardinality (tensorflow/python/distribute/input_lib.py), i.e.
    per-replica batches: `local_replicas` times the steps when one worker
    feeds several replicas. Keras 3 `fit` takes it as steps per epoch, so
    it would print the wrong step count and warn "Your input ran out of
    data" every epoch (it warns the same way for unknown cardinality). The
    builder knows the true count, so it sets it.
    """
    if not plans or plans[0].steps_per_epoch is None:
        return
    plan = plans[0]
    if plan.local_replicas > 1 and hasattr(dataset, "_cardinality"):
        dataset._cardinality = plan.steps_per_epoch  # pylint: disable=protected-access


def dataset_options(options: PipelineOptions) -> tf.data.Options:
    """The `tf.data.Options` for `options` (auto-shard OFF: we shard)."""
    opts = tf.data.Options()
    opts.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    if options.private_threadpool_size:
        opts.threading.private_threadpool_size = options.private_threadpool_size
    if options.autotune_ram_budget:
        opts.autotune.ram_budget = options.autotune_ram_budget
    if options.deterministic is not None:
        opts.deterministic = options.deterministic
    return opts


def _input_options(options: PipelineOptions) -> tf.distribute.InputOptions:
    buffer = options.device_prefetch
    if buffer == AUTO:
        buffer = 2 if tf.config.list_physical_devices("GPU") else 1
    return tf.distribute.InputOptions(
        experimental_fetch_to_device=True, experimental_per_replica_buffer_size=buffer
    )


def _autotune(value: int | str) -> int:
    return tf.data.AUTOTUNE if value == AUTOTUNE else int(value)


def _compose(first, second):
    if first is None:
        return second
    if second is None:
        return first

    def composed(*args):
        out = first(*args)
        return second(*out) if isinstance(out, tuple) else second(out)

    return composed
