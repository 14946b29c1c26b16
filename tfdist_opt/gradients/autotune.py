"""Measured pack-size autotune: time candidate sizes on the real shapes.

Horovod's autotune searches fusion-buffer size and cycle time with Bayesian
optimisation while training. We tune the one knob that matters here
(`bytes_per_pack`) over a geometric grid (`packing.candidate_pack_sizes`):
for each candidate, all-reduce zero tensors of the model's gradient shapes
and dtypes (after compression) `iters` times after `warmup` untimed runs,
take the median, keep the fastest. Every worker measures; the medians are
then all-reduced (averaged) so every worker sees the same numbers and picks
the same size (a worker picking differently would trace different
collectives and hang). The chief writes every trial to a CSV.

It runs when the optimizer is built (`fit` builds it before step 1) on a
multi-worker strategy with `bytes_per_pack="auto"`; on one host the
all-reduce is an in-memory reduction and packing has no measurable effect,
so the `auto` policy alone is used there.
"""

from __future__ import annotations

import csv
import os
import statistics
import time
from typing import Sequence

from absl import logging
import tensorflow as tf

from tfdist_opt.gradients import allreduce
from tfdist_opt.gradients import packing
from tfdist_opt.gradients.options import GradientOptions

CSV_FIELDS = ("bytes_per_pack", "num_packs", "median_s", "min_s", "max_s",
              "iters", "chosen")


def time_all_reduce(strategy: tf.distribute.Strategy,
                    shapes: Sequence[tuple[tuple[int, ...], str]],
                    options: GradientOptions, warmup: int = 2, iters: int = 5
                    ) -> list[float]:
    """Seconds per all-reduce of zeros with these shapes, `iters` samples.

    Args:
        strategy: the strategy whose collectives to time.
        shapes: list of (shape, dtype name) pairs: the gradients.
        options: `GradientOptions`; `bytes_per_pack` must be an int here.
        warmup: int. Untimed runs first (tracing, connection set-up).
        iters: int. Timed runs.
    """
    with strategy.scope():
        tensors = [tf.zeros(s, d) for s, d in shapes]

    def replica_fn():
        out = allreduce.all_reduce_sum(tensors, options, strategy)
        # One scalar back, so the timing includes every collective.
        return tf.add_n([tf.reduce_sum(tf.cast(o[..., :1] if o.shape.rank else o,
                                               tf.float32)) for o in out])

    @tf.function
    def step():
        return strategy.run(replica_fn)

    times = []
    for i in range(warmup + iters):
        t0 = time.perf_counter()
        result = step()
        _block(strategy, result)
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return times


def tune(strategy: tf.distribute.Strategy,
         shapes: Sequence[tuple[tuple[int, ...], str]],
         options: GradientOptions, candidates: Sequence[int] | None = None,
         warmup: int = 2, iters: int = 5, csv_path: str | None = None
         ) -> tuple[int, list[dict]]:
    """Times every candidate pack size and returns the fastest.

    Returns:
        (best bytes_per_pack, list of trial rows as in `CSV_FIELDS`).
    """
    sizes = [_nbytes(s, d, options) for s, d in shapes]
    if candidates is None:
        candidates = packing.candidate_pack_sizes(sizes)
    medians, rows = [], []
    for b in candidates:
        opts = GradientOptions(bytes_per_pack=b, compression=options.compression,
                               predivide=options.predivide)
        times = time_all_reduce(strategy, shapes, opts, warmup, iters)
        medians.append(statistics.median(times))
        rows.append({"bytes_per_pack": b,
                     "num_packs": len(packing.assign_buckets(
                         sizes, packing.fixed_policy(b))),
                     "min_s": min(times), "max_s": max(times), "iters": iters})
    agreed = _agree(strategy, medians)
    for row, m in zip(rows, agreed):
        row["median_s"] = m
    best = packing.choose_fastest([(r["bytes_per_pack"], r["median_s"])
                                   for r in rows])
    for row in rows:
        row["chosen"] = int(row["bytes_per_pack"] == best)
        logging.info("tfdist_opt autotune: bytes_per_pack=%d packs=%d "
                     "median=%.2f ms%s", row["bytes_per_pack"], row["num_packs"],
                     1e3 * row["median_s"], " <- chosen" if row["chosen"] else "")
    if csv_path and _is_chief(strategy):
        write_csv(csv_path, rows)
    return best, rows


def write_csv(path: str, rows: Sequence[dict]) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k) for k in CSV_FIELDS})


def maybe_tune_for_variables(strategy, variables, options: GradientOptions
                             ) -> int | None:
    """Autotunes on a multi-worker strategy, stores the result on it."""
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return None
    if strategy.extended._num_workers < 2 or not tf.executing_eagerly():
        return None
    if getattr(strategy, allreduce._TUNED_ATTR, None) is not None:
        return getattr(strategy, allreduce._TUNED_ATTR)
    shapes = [(tuple(v.shape), _dtype_name(v)) for v in variables]
    best, _ = tune(strategy, shapes, options, warmup=1, iters=3,
                   csv_path=options.autotune_csv)
    setattr(strategy, allreduce._TUNED_ATTR, best)
    return best


def _agree(strategy, values: Sequence[float]) -> list[float]:
    """Mean of `values` over all replicas (identical result everywhere)."""
    vec = tf.constant(list(values), tf.float64)

    @tf.function
    def fn():
        return strategy.run(lambda: tf.distribute.get_replica_context().all_reduce(
            tf.distribute.ReduceOp.MEAN, vec))

    out = strategy.experimental_local_results(fn())[0]
    return [float(x) for x in out.numpy()]


def _block(strategy, result) -> None:
    for r in strategy.experimental_local_results(result):
        r.numpy()


def _is_chief(strategy) -> bool:
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.cluster_spec().as_dict():
        return True
    return resolver.task_type in (None, "chief") or (
        resolver.task_type == "worker" and resolver.task_id == 0
        and "chief" not in resolver.cluster_spec().as_dict())


def _dtype_name(v) -> str:
    d = getattr(v, "dtype", "float32")
    return d if isinstance(d, str) else tf.as_dtype(d).name


def _nbytes(shape, dtype, options: GradientOptions) -> int:
    from tfdist_opt.gradients import precision

    n = 1
    for s in shape:
        n *= int(s)
    wire = precision.compress_dtype(dtype, options.wire_dtype) or dtype
    return n * tf.as_dtype(wire).size
