"""TFRecord sources in `build_dataset`: the files, their record counts, the reader.

The TFRecord counterpart of `tfdist_opt.data.tfds_source`: `resolve_files`
and `count_records` give what `sharding.plan_shards` plans from, and `read`
builds one worker's stream of records (its files interleaved; under DATA
sharding every worker reads all files in the same order and keeps every
n-th record).
"""

from __future__ import annotations

import tensorflow as tf

from tfdist_opt.data import sharding
from tfdist_opt.data import sources as sources_lib
from tfdist_opt.data import tfrecord_files
from tfdist_opt.data.options import PipelineOptions


def resolve_files(patterns: tuple[str, ...] | str) -> list[str]:
    """Sorted, de-duplicated files matching the pattern(s).

    Raises:
        ValueError: nothing matched (the message names the patterns).
    """
    patterns = (patterns,) if isinstance(patterns, str) else tuple(patterns)
    files = sorted({f for p in patterns for f in tf.io.gfile.glob(p)})
    if not files:
        raise ValueError(
            f"Invalid value for `pattern`: no files match. Received: "
            f"pattern={list(patterns)!r}. Expected a glob matching TFRecord files."
        )
    return files


def count_records(files: list[str], compression_type: str | None = None) -> list[int]:
    """Records per file: header-only seeks for local uncompressed files,
    a tf.data pass otherwise."""
    counts = []
    for f in files:
        if not compression_type and "://" not in f:
            counts.append(sources_lib.count_tfrecords(f))
        else:
            ds = tf.data.TFRecordDataset(f, compression_type=compression_type)
            counts.append(int(ds.reduce(tf.constant(0, tf.int64), lambda c, _: c + 1)))
    return counts


def read(
    shard_plan: sharding.ShardPlan,
    source: sources_lib.TFRecordSource,
    options: PipelineOptions,
    counts: dict[str, int],
) -> tf.data.Dataset:
    names = list(shard_plan.files)
    files = tf.data.Dataset.from_tensor_slices((names, [int(counts[f]) for f in names]))
    n = len(names)
    if shard_plan.policy == sharding.DATA:
        # Every worker must see the same element order before `shard`, so:
        # no file shuffle, a fixed cycle length, deterministic interleave.
        cycle = options.cycle_length if isinstance(options.cycle_length, int) else min(n, 8)
        deterministic = True
    else:
        if options.shuffle and options.cache_kind == "none" and n > 1:
            files = files.shuffle(
                n, seed=options.seed, reshuffle_each_iteration=options.reshuffle_each_iteration
            )
        cycle = options.cycle_length if isinstance(options.cycle_length, int) else tf.data.AUTOTUNE
        deterministic = None

    def read_all():
        return files.interleave(
            lambda f, count: tfrecord_files.read_file(
                f, count, source.compression_type or "", options.corrupt_records
            ),
            cycle_length=cycle,
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=deterministic,
        )

    ds = read_all()
    if options.corrupt_records == "skip":
        # Records skipped are replaced from a second pass (read only if the
        # first falls short), so `take(examples_kept)` still fills the epoch
        # and every worker runs its planned steps.
        ds = ds.concatenate(read_all())
    if shard_plan.policy == sharding.DATA:
        ds = ds.shard(shard_plan.num_workers, shard_plan.worker_index)
    return ds
