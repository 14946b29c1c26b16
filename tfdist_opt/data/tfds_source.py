"""TFDS loading for `build_dataset()`: local `data_dir`, sharded at read time.

Nothing is downloaded unless `TFDSSource(download=True)`. With at least as
many TFDS shard files as input pipelines, files are split through TFDS's own
`ReadConfig(input_context=...)` (FILE); otherwise each pipeline reads its
`tfds.even_splits(split, n)[i]` sub-split (DATA: contiguous example ranges,
only the needed part of each file is read).
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from tfdist_opt.data import sharding
from tfdist_opt.data.options import PipelineOptions
from tfdist_opt.data.sources import TFDSSource


def _tfds():
    try:
        import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
    except ImportError as e:  # pragma: no cover - a declared dependency
        raise ImportError(
            "TFDSSource needs tensorflow-datasets: pip install 'tensorflow-datasets>=4.9'"
        ) from e
    return tfds


def load_builder(source: TFDSSource) -> Any:
    """The prepared TFDS builder for `source`, never downloading unasked.

    Raises:
        FileNotFoundError: the dataset is not prepared in `data_dir` and
            `download=False`.
    """
    tfds = _tfds()
    builder = tfds.builder(source.name, data_dir=source.data_dir, **dict(source.builder_kwargs))
    if not builder.is_prepared():
        if not source.download:
            raise FileNotFoundError(
                f"TFDS dataset {source.name!r} is not prepared in "
                f"{builder.data_dir!r} and download=False. Received: "
                f"data_dir={source.data_dir!r}. Expected a data_dir holding the "
                "prepared dataset, or TFDSSource(..., download=True) to "
                "download and prepare it."
            )
        builder.download_and_prepare()
    return builder


def examples_per_file(builder: Any, split: str) -> list[int]:
    """Examples each TFDS shard file contributes to `split` (TFDS order)."""
    return [fi.take for fi in builder.info.splits[split].file_instructions]


def even_split_sizes(builder: Any, split: str, num_workers: int) -> list[int]:
    """Examples in each `tfds.even_splits(split, num_workers)` sub-split."""
    tfds = _tfds()
    return [builder.info.splits[sub].num_examples for sub in tfds.even_splits(split, num_workers)]


def plan(
    builder: Any,
    source: TFDSSource,
    input_context: Any,
    global_batch_size: int,
    options: PipelineOptions,
) -> sharding.ShardPlan:
    """The shard plan for this worker over a TFDS split."""
    counts = examples_per_file(builder, source.split)
    files = [fi.filename for fi in builder.info.splits[source.split].file_instructions]
    n = input_context.num_input_pipelines
    return sharding.plan_shards(
        num_workers=n,
        worker_index=input_context.input_pipeline_id,
        num_replicas=input_context.num_replicas_in_sync,
        global_batch_size=global_batch_size,
        files=files,
        examples_per_file=counts,
        requested=options.shard_policy,
        uneven=options.uneven,
        data_shard_sizes_override=(even_split_sizes(builder, source.split, n) if n > 1 else None),
    )


def read(
    builder: Any,
    source: TFDSSource,
    shard_plan: sharding.ShardPlan,
    input_context: Any,
    options: PipelineOptions,
) -> tf.data.Dataset:
    """This worker's examples, unbatched, per `shard_plan`."""
    tfds = _tfds()
    shuffle_files = options.shuffle and options.cache_kind == "none"
    read_config = tfds.ReadConfig(
        shuffle_seed=options.seed,
        shuffle_reshuffle_each_iteration=options.reshuffle_each_iteration,
        input_context=(input_context if shard_plan.policy == sharding.FILE else None),
    )
    split = source.split
    if shard_plan.policy == sharding.DATA:
        split = tfds.even_splits(split, shard_plan.num_workers)[shard_plan.worker_index]
        # Contiguous ranges: file order must not change what a worker holds.
        shuffle_files = False
    return builder.as_dataset(
        split=split,
        shuffle_files=shuffle_files,
        read_config=read_config,
        as_supervised=source.as_supervised,
    )
