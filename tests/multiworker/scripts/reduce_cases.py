"""Calls `strategy.reduce` the ways Keras 3 does, on each worker.

Prints one JSON line: {"ours": {case: value-or-error}, "plain": {...}}.
Both run on one `KerasMultiWorkerMirroredStrategy` (one cluster): "ours"
calls its `reduce`, "plain" calls upstream
`tf.distribute.MultiWorkerMirroredStrategy.reduce` on the same instance,
i.e. the strategy without our override.
"""

import json

import tensorflow as tf

from tfdist_opt.keras import keras_compat

impl = tf.distribute.experimental.CommunicationImplementation.RING
options = tf.distribute.experimental.CommunicationOptions(implementation=impl)
strategy = keras_compat.KerasMultiWorkerMirroredStrategy(communication_options=options)
rank = strategy.cluster_resolver.task_id


def case(fn):
    try:
        value = fn()
        return tf.nest.map_structure(lambda t: t.numpy().tolist(), value)
    except Exception as e:  # pylint: disable=broad-except
        return f"error: {type(e).__name__}: {str(e)[:200]}"


# Worker r contributes x = r + 1 (so the mean over 2 workers is 1.5).
dist = strategy.experimental_distribute_values_from_function(
    lambda ctx: tf.constant(float(rank + 1))
)
dist_vec = strategy.experimental_distribute_values_from_function(
    lambda ctx: tf.fill([2], float(rank + 1))
)


def cases(reduce):
    return {
        # keras trainer._maybe_symbolic_build: a nest, axis=None.
        "nest": case(lambda: reduce("MEAN", (dist, {"y": dist}), axis=None)),
        # keras trainer.reduce_per_replica: scalar metric, axis=0.
        "scalar_axis0": case(lambda: reduce("MEAN", dist, axis=0)),
        # TF's own semantics for rank >= 1 with an axis are kept.
        "vector_axis0": case(lambda: reduce("SUM", dist_vec, axis=0)),
    }


upstream = tf.distribute.MultiWorkerMirroredStrategy.reduce
out = {"plain": cases(lambda *a, **k: upstream(strategy, *a, **k)), "ours": cases(strategy.reduce)}
print("RESULT " + json.dumps(out), flush=True)
