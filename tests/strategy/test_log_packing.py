"""`LogPacker`: which values are reduced together, and into what."""

import numpy as np
import tensorflow as tf

from tfdist_opt.keras import log_packing


def _strategy():
    cpus = tf.config.list_logical_devices("CPU")
    return tf.distribute.MirroredStrategy([d.name for d in cpus[:2]])


def _sum_reduce(calls):
    def reduce_fn(op, value):
        calls.append((op, [tuple(v.shape) for v in value.values]))
        total = tf.add_n(list(value.values))
        return total / len(value.values) if op == "MEAN" else total

    return reduce_fn


def test_scalars_of_one_run_are_reduced_in_one_call_per_dtype():
    strategy = _strategy()
    n = strategy.num_replicas_in_sync
    outputs = strategy.run(
        lambda: {
            "loss": tf.constant(1.0)
            + tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32),
            "acc": tf.constant(0.5),
            "f64": tf.constant(2.0, tf.float64),
            "vec": tf.ones([3]),  # not rank 0: ordinary path
            "count": tf.constant(4),  # not floating: ordinary path
        }
    )
    calls = []
    packer = log_packing.LogPacker(_sum_reduce(calls))
    packer.remember(outputs)
    loss = packer.lookup("MEAN", outputs["loss"])
    acc = packer.lookup(tf.distribute.ReduceOp.MEAN, outputs["acc"])
    f64 = packer.lookup("MEAN", outputs["f64"])
    assert packer.lookup("MEAN", outputs["vec"]) is None
    assert packer.lookup("MEAN", outputs["count"]) is None
    # float32 pair stacked into one vector; float64 alone: 2 calls in all.
    assert calls == [("MEAN", [(2,)] * n), ("MEAN", [()] * n)]
    assert packer.collectives == 2
    np.testing.assert_allclose(loss.numpy(), 1.0 + (n - 1) / 2)
    assert acc.numpy() == 0.5 and f64.numpy() == 2.0


def test_values_of_an_earlier_run_take_the_ordinary_path():
    strategy = _strategy()
    first = strategy.run(lambda: tf.constant(1.0))
    second = strategy.run(lambda: tf.constant(2.0))
    calls = []
    packer = log_packing.LogPacker(_sum_reduce(calls))
    packer.remember(first)
    packer.remember(second)
    assert packer.lookup("MEAN", first) is None
    assert packer.lookup("MAX", second) is None  # only MEAN and SUM pack
    assert packer.lookup("SUM", second).numpy() == 2.0 * strategy.num_replicas_in_sync
    assert calls and packer.collectives == 1
