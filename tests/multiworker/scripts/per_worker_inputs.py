"""Per-worker and function-made input on each worker, with every example counted (issue 62).

Each case trains a one-layer model on 16 examples whose labels carry the
example's id (`y = [target, id]`; the loss reads the target only) and a
metric that counts the ids the train steps used, summed over every replica
of every worker, reset each epoch: the history holds each epoch's count per
example. Prints one `RESULT {"mode": case, ...}` line per case, an error as
{"error": "..."}.

On workers (TF_CONFIG set; `TFDIST_OPT_REPLICAS` picks the replicas) the
cases feed the cluster; without TF_CONFIG, the one-process reference feeds
the same global batches, one run per global batch in `REFERENCE_BATCHES`.
"""

import json
import os
import re
import sys

import numpy as np

import tfdist_opt

strategy = tfdist_opt.opt_strategy()

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from tests.multiworker import harness  # noqa: E402

N = 16
EPOCHS = 2
REFERENCE_BATCHES = (2, 4, 8)
CLUSTER = "TF_CONFIG" in os.environ
RANK = json.loads(os.environ.get("TF_CONFIG", '{"task": {"index": 0}}'))["task"]["index"]
WORKERS = len(json.loads(os.environ["TF_CONFIG"])["cluster"].get("worker", ())) if CLUSTER else 1

rng = np.random.RandomState(0)
X = rng.randn(N, 3).astype("float32")
Y = np.concatenate([rng.randn(N, 1), np.arange(N)[:, None]], axis=1).astype("float32")


class IdCounts(keras.metrics.Metric):
    """How often each example id was in a train step's batch."""

    def __init__(self, name="ids", **kwargs):
        super().__init__(name=name, **kwargs)
        self.counts = self.add_weight(shape=(N,), initializer="zeros", name="counts")

    def update_state(self, y_true, y_pred, sample_weight=None):
        ids = tf.cast(y_true[:, 1], "int32")
        self.counts.assign_add(tf.reduce_sum(tf.one_hot(ids, N), axis=0))

    def result(self):
        return {f"id{i}": self.counts[i] for i in range(N)}


def target_mse(y_true, y_pred):
    return tf.reduce_mean(tf.square(y_true[:, :1] - y_pred), axis=-1)


def train(x):
    """Trains the id-counting model on `x` (what `fit` gets)."""
    with strategy.scope():
        model = keras.Sequential(
            [keras.Input((3,)), keras.layers.Dense(1, kernel_initializer="ones")]
        )
        model.compile(keras.optimizers.SGD(0.1), target_mse, metrics=[IdCounts()])
    history = model.fit(x, epochs=EPOCHS, verbose=0).history
    counts = [[int(round(history[f"id{i}"][e])) for i in range(N)] for e in range(EPOCHS)]
    return {
        "loss": history["loss"],
        "counts": counts,
        "weights": [np.asarray(w, "float64").tolist() for w in model.get_weights()],
    }


def reference():
    """One process, the same global batches in order (ids 0..G-1, G..2G-1, ...)."""
    return {
        str(g): train(tf.data.Dataset.from_tensor_slices((X, Y)).batch(g))
        for g in REFERENCE_BATCHES
    }


def off(dataset):
    opts = tf.data.Options()
    opts.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return dataset.with_options(opts)


def own_shard(batch):
    """This worker's examples (ids r, r + W, ...) in batches of `batch`, auto-sharding OFF."""
    return off(
        tf.data.Dataset.from_tensor_slices((X[RANK::WORKERS], Y[RANK::WORKERS])).batch(batch)
    )


def own_generator(batch):
    """Ray Train's `to_tf(batch_size=...)` on this worker's shard: a generator, auto-sharding OFF.

    The batch size is not known before step 1 (`from_generator` with a
    batch dimension of None, as Ray's `to_tf` makes it).
    """
    x, y = X[RANK::WORKERS], Y[RANK::WORKERS]

    def batches():
        for start in range(0, len(x), batch):
            yield x[start : start + batch], y[start : start + batch]

    signature = (
        tf.TensorSpec((None, 3), tf.float32),
        tf.TensorSpec((None, 2), tf.float32),
    )
    return off(tf.data.Dataset.from_generator(batches, output_signature=signature))


def follow_advice(make):
    """Trains on `make(1)`, which must be refused, then on `make(N)` for the "Use e.g. N" it says."""
    try:
        train(make(1))
    except ValueError as e:
        match = re.search(r"Use e\.g\. (\d+)", str(e))
        assert match, str(e)
    else:
        raise AssertionError("a batch of 1 trained on several replicas per worker")
    batch = int(match.group(1))
    return batch, train(make(batch))


def per_worker_split():
    """Per-worker batch 2 on each worker: global batch 2 x workers."""
    return {"global_batch": 2 * WORKERS, **train(own_shard(2))}


def per_worker_advice():
    """Per-worker batch 1 the replicas of a worker cannot split: follow the error's advice."""
    batch, result = follow_advice(own_shard)
    return {"advice": batch, "global_batch": batch * WORKERS, **result}


def generator_split():
    """A generator's per-worker batch of 2 (size unknown before step 1): global batch 2 x workers."""
    return {"global_batch": 2 * WORKERS, **train(own_generator(2))}


def generator_not_split():
    """A generator's per-worker batch of 1 on several replicas per worker: refused at its first batch."""
    try:
        train(own_generator(1))
    except tf.errors.InvalidArgumentError as e:
        return {"refused": e.message[:2000]}
    return {"error": "a generator's per-worker batch of 1 trained on several replicas per worker"}


def auto_sharded_advice():
    """An auto-sharded global batch of 1: follow the error's advice."""
    batch, result = follow_advice(lambda b: tf.data.Dataset.from_tensor_slices((X, Y)).batch(b))
    return {"advice": batch, "global_batch": batch, **result}


def from_function():
    """`strategy.distribute_datasets_from_function`: each pipeline its shard, per-replica batches."""
    global_batch = 8

    def dataset_fn(context):
        per_replica = context.get_per_replica_batch_size(global_batch)
        return (
            tf.data.Dataset.from_tensor_slices((X, Y))
            .shard(context.num_input_pipelines, context.input_pipeline_id)
            .batch(per_replica)
        )

    return {
        "global_batch": global_batch,
        **train(strategy.distribute_datasets_from_function(dataset_fn)),
    }


CASES = {
    "per_worker_split": per_worker_split,
    "per_worker_advice": per_worker_advice,
    "auto_sharded_advice": auto_sharded_advice,
    "generator_split": generator_split,
    "generator_not_split": generator_not_split,
    "from_function": from_function,
}
if CLUSTER:
    for name in sys.argv[1:] or CASES:
        harness.report(name, CASES[name])
else:
    harness.report("reference", reference)
