"""Time a collective, then agree on the figure across workers: one function.

Used by the pack-size autotune (`autotune`), the all-reduce benchmark
(`benchmarks/allreduce.py`) and `callbacks.CommunicationProfiler`. Every
worker times `strategy.run(replica_fn)` inside one `tf.function` (each call
completed by copying its results to the host), then the median, min and max
are averaged over all replicas with one all-reduce, so every worker gets the
same numbers and takes the same decision (a worker deciding differently
would trace different collectives and hang). Every worker must call it the
same number of times with the same `iters`/`warmup`: it is a collective.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Callable, Sequence

import tensorflow as tf


@dataclasses.dataclass(frozen=True)
class Timing:
    """One timed collective.

    Attributes:
        median_s, min_s, max_s: float. Seconds per call, each averaged over
            all replicas (identical on every worker).
        samples: tuple of (start, end) `time.perf_counter()` pairs of the
            timed calls on this worker.
    """

    median_s: float
    min_s: float
    max_s: float
    samples: tuple = ()

    @property
    def local_times(self) -> list[float]:
        """This worker's seconds per timed call."""
        return [end - start for start, end in self.samples]


def agree(
    strategy: tf.distribute.Strategy, values: Sequence[float], op: str = "MEAN"
) -> list[float]:
    """`values` reduced (`"MEAN"` or `"SUM"`) over all replicas, everywhere.

    Example:
        >>> agree(tf.distribute.get_strategy(), [1.0, 2.0])  # doctest: +SKIP
        [1.0, 2.0]
    """
    reduce_op = {"MEAN": tf.distribute.ReduceOp.MEAN, "SUM": tf.distribute.ReduceOp.SUM}.get(op)
    if reduce_op is None:
        raise ValueError(f"Invalid value for `op`: expected 'MEAN' or 'SUM'. Received: op={op!r}")
    vec = tf.constant(list(values), tf.float64)

    def replica_fn():
        # `tf.identity` per replica: MirroredStrategy returns a tensor that is
        # the same object in every replica (a capture) unreduced, so a SUM of
        # a capture would come back as the value itself.
        return tf.distribute.get_replica_context().all_reduce(reduce_op, tf.identity(vec))

    @tf.function
    def fn():
        return strategy.run(replica_fn)

    out = strategy.experimental_local_results(fn())[0]
    return [float(x) for x in out.numpy()]


def time_collective(
    strategy: tf.distribute.Strategy,
    replica_fn: Callable,
    iters: int,
    warmup: int,
    args_fn: Callable[[int], tuple] | None = None,
) -> list:
    """(start, end) of `iters` calls of `strategy.run(replica_fn)`, local.

    Args:
        strategy: the strategy whose collectives `replica_fn` runs.
        replica_fn: the per-replica function (traced once).
        iters: int >= 1. Timed calls.
        warmup: int >= 0. Untimed calls first (tracing, connection set-up).
        args_fn: call index -> tuple of tensors passed to `replica_fn`
            (e.g. a seed, so nothing is constant-folded). Default: no args.
    """
    for name, value, minimum in (("iters", iters, 1), ("warmup", warmup, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(
                f"Invalid value for `{name}`: expected an int "
                f">= {minimum}. Received: {name}={value!r}"
            )
    args_fn = args_fn or (lambda i: ())

    @tf.function
    def step(*args):
        return strategy.run(replica_fn, args=args)

    def run_once(i):
        out = step(*args_fn(i))
        for r in tf.nest.flatten(strategy.experimental_local_results(out)):
            if hasattr(r, "numpy"):
                r.numpy()

    for i in range(warmup):
        run_once(i)
    samples = []
    for i in range(iters):
        start = time.perf_counter()
        run_once(i)
        samples.append((start, time.perf_counter()))
    return samples


def time_and_agree(
    strategy: tf.distribute.Strategy,
    replica_fn: Callable,
    iters: int,
    warmup: int,
    args_fn: Callable[[int], tuple] | None = None,
) -> Timing:
    """`time_collective`, then median/min/max averaged over all replicas."""
    samples = time_collective(strategy, replica_fn, iters, warmup, args_fn)
    times = [end - start for start, end in samples]
    med, lo, hi = agree(strategy, [statistics.median(times), min(times), max(times)])
    return Timing(median_s=med, min_s=lo, max_s=hi, samples=tuple(samples))
