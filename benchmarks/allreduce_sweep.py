"""The all-reduce sweep of `benchmarks/allreduce.py --mode=sweep`.

One tensor per size, 4x apart from `min_bytes` to `max_bytes`, SUM over
every replica, in these settings (rows):

* `tf_default_fp32`: TF's `ReplicaContext.all_reduce` under glibc's malloc;
* `tf_default_fp32_tuned_malloc`: the same under the allocator policy
  `opt_strategy()` sets (`tfdist_opt.strategy.devices.host_memory`);
* `tf_default_fp32_no_mmap`: the same with mmap off;
* `ours_streams`: the streamed all-reduce multi-worker Keras 3 training
  runs (`tfdist_opt.gradients.collectives.collectives`, `collective_streams="auto"` and
  the default piece size), under the tuned allocator.
"""

from __future__ import annotations

from absl import logging

from benchmarks import allreduce_timing
from benchmarks import allreduce_transport
from benchmarks import common
from benchmarks import progress


def sweep(strategy, n, min_bytes, max_bytes, iters_max, warmup, budget_bytes) -> list[dict]:
    """Times every setting at every size; returns the rows."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    from tfdist_opt.gradients.collectives import collectives  # pylint: disable=g-import-not-at-top
    from tfdist_opt.gradients import gradient_plan  # pylint: disable=g-import-not-at-top
    from tfdist_opt.strategy import StrategyConfig  # pylint: disable=g-import-not-at-top
    from tfdist_opt.strategy.devices import host_memory  # pylint: disable=g-import-not-at-top

    streams = collectives.Collectives(
        strategy,
        packing=collectives.Packing(
            streams=gradient_plan.AUTO_STREAMS, piece_bytes=StrategyConfig().collective_piece_bytes
        ),
    )

    def plain(t):
        return allreduce_timing.scalar([tf.distribute.get_replica_context().all_reduce("SUM", t)])

    def streamed(t):
        return allreduce_timing.scalar(streams.all_reduce_sum([t]))

    rows = []
    sizes, size = 0, min_bytes
    while size <= max_bytes:
        sizes, size = sizes + 1, size * 4
    settings = (
        ("tf_default_fp32", host_memory.restore_defaults, plain),
        ("tf_default_fp32_tuned_malloc", host_memory.tune_for_collectives, plain),
        ("tf_default_fp32_no_mmap", allreduce_transport.no_mmap, plain),
        ("ours_streams", host_memory.tune_for_collectives, streamed),
    )
    bar = progress.Progress(max(1, len(settings) * sizes), enabled=common.is_chief())
    for setting, apply, reduce in settings:
        apply()
        size = min_bytes
        while size <= max_bytes:
            t = tf.zeros([size // 4], tf.float32)
            iters = max(3, min(iters_max, budget_bytes // size))
            res = allreduce_timing.timer(
                strategy,
                lambda t=t, reduce=reduce: reduce(t),
                iters,
                min(warmup, 1 if size > (64 << 20) else warmup),
            )
            algbw = size / res["time_s"]
            rows.append(
                {
                    "section": "sweep",
                    "setting": setting,
                    "bytes": size,
                    **res,
                    "algbw_gbps": algbw / 1e9,
                    "busbw_gbps": algbw * common.bus_factor(n) / 1e9,
                }
            )
            logging.info(
                "sweep %-30s %10d B  %8.3f ms  algbw %.3f GB/s  busbw %.3f GB/s",
                setting,
                size,
                1e3 * res["time_s"],
                algbw / 1e9,
                algbw * common.bus_factor(n) / 1e9,
            )
            bar.done(f"sweep {setting} {size} B")
            size *= 4
    allreduce_transport.no_mmap(False)
    host_memory.tune_for_collectives()
    return rows
