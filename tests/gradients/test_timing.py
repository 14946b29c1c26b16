"""The one timing-and-agree function (autotune, benchmarks, CommunicationProfiler)."""

import pytest
import tensorflow as tf

from tfdist_opt.gradients.autotune import timing


def test_agree_reduces_over_replicas(strategy):
    assert timing.agree(strategy, [1.5, -2.0], op="SUM") == [3.0, -4.0]
    assert timing.agree(strategy, [1.5, -2.0]) == [1.5, -2.0]
    with pytest.raises(ValueError, match=r"`op`: expected 'MEAN' or 'SUM'. Received: op='MAX'"):
        timing.agree(strategy, [1.0], op="MAX")


def test_time_and_agree_times_every_call_with_its_args(strategy):
    seen = []

    def replica_fn(seed):
        ctx = tf.distribute.get_replica_context()
        return ctx.all_reduce(tf.distribute.ReduceOp.SUM, seed * 2.0)

    def args_fn(i):
        seen.append(i)
        return (tf.constant(float(i)),)

    t = timing.time_and_agree(strategy, replica_fn, iters=4, warmup=2, args_fn=args_fn)
    assert seen == [0, 1, 0, 1, 2, 3]  # warm-up calls, then the timed ones
    assert len(t.samples) == 4 and all(end >= start for start, end in t.samples)
    assert 0 < t.min_s <= t.median_s <= t.max_s
    with pytest.raises(ValueError, match=r"`iters`: expected an int >= 1. Received: iters=0"):
        timing.time_collective(strategy, replica_fn, iters=0, warmup=0)
