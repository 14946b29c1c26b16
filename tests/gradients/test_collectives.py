"""The collective layer (`collectives`): one path from Keras to the wire.

* On the default multi-worker path (hooked, streamed pieces), traced on 2
  virtual CPU replicas, at most 6 tfdist_opt functions stand between
  Keras's `apply_gradients` and the `CollectiveReduceV2` op (the stack at
  the op, read with `traceback`);
* a `tf.IndexedSlices` gradient next to dense ones is summed by the
  layer's one sparse split, in the replica context, whatever the dense
  ones take (packs, streams).
"""

import traceback

import numpy as np
import pytest
import keras
import tensorflow as tf

from tfdist_opt.gradients.collectives import collectives
from tfdist_opt.gradients.binding import keras_binding
from tfdist_opt.gradients.options import GradientOptions
from tfdist_opt.strategy import opt_strategy

MAX_DEPTH = 6


def test_keras_to_the_collective_op_is_at_most_six_project_functions(monkeypatch):
    stacks = []
    real = tf.raw_ops.CollectiveReduceV2

    def spy(**kw):
        stacks.append(traceback.extract_stack()[:-1])
        return real(**kw)

    monkeypatch.setattr(tf.raw_ops, "CollectiveReduceV2", spy)
    strategy = opt_strategy(cpu_replicas=2, mode="mirrored", all_reduce="reduce_to_one")
    keras_binding.attach(strategy, GradientOptions(hooked=True, collective_streams=2))
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
        model.compile(keras.optimizers.SGD(0.1), "mse")
    model.fit(np.ones((8, 4), "float32"), np.ones((8, 3), "float32"), batch_size=4, verbose=0)
    assert stacks
    frames = stacks[0]
    start = max(i for i, f in enumerate(frames) if f.name == "apply_gradients")
    ours = [f"{f.filename}:{f.name}" for f in frames[start:] if "/tfdist_opt/" in f.filename]
    assert 0 < len(ours) <= MAX_DEPTH, ours


@pytest.mark.parametrize(
    "packing",
    [collectives.Packing(0), collectives.Packing(4), collectives.Packing(streams=2, piece_bytes=4)],
    ids=["one_pack", "packs", "streams"],
)
def test_sparse_and_dense_sum_together(packing):
    strategy = opt_strategy(cpu_replicas=2)
    layer = collectives.Collectives(strategy, collectives.Codec(), packing)

    @tf.function
    def fn():
        rid = tf.cast(tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32)
        dense = tf.fill([3], rid + 1.0)
        sparse = tf.IndexedSlices(tf.fill([1, 2], rid + 1.0), tf.constant([1]), tf.constant([4, 2]))
        out = layer.all_reduce_sum([dense, None, sparse])
        assert out[1] is None and isinstance(out[2], tf.IndexedSlices)
        return out[0], tf.convert_to_tensor(out[2])

    dense, sparse = strategy.run(fn)
    np.testing.assert_array_equal(strategy.experimental_local_results(dense)[0], [3.0] * 3)
    np.testing.assert_array_equal(
        strategy.experimental_local_results(sparse)[0], [[0, 0], [3, 3], [0, 0], [0, 0]]
    )
