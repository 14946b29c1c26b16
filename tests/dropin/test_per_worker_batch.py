"""`global_batch.per_worker_batch`: which datasets are per-worker data.

A `tf.data` dataset with auto-sharding OFF on several workers is per-worker
data: each worker's batch is its share of the global batch, so `fit`
accepts a per-worker batch of 1 on 2 workers with one replica each (Ray
Train's `to_tf(batch_size=1)`), where it refused it before. With several
replicas per worker, each worker's batch is split over its own replicas
(`per_worker_dataset_fn`), and a batch they cannot split is refused. The
2-worker training is in tests/multiworker/test_dropin_inputs.py and
test_per_worker_inputs.py.
"""

import types

import pytest
import tensorflow as tf

from tfdist_opt.keras import global_batch


class _Resolver:
    def __init__(self, workers):
        self.workers = workers

    def cluster_spec(self):
        return tf.train.ClusterSpec(
            {"worker": [f"localhost:{1000 + i}" for i in range(self.workers)]}
        )


class _Strategy(tf.distribute.MultiWorkerMirroredStrategy):
    """Only what the check reads: workers and replicas in sync."""

    def __init__(self, workers, replicas):  # pylint: disable=super-init-not-called
        self._resolver = _Resolver(workers)
        self._replicas = replicas

    @property
    def cluster_resolver(self):
        return self._resolver

    @property
    def num_replicas_in_sync(self):
        return self._replicas

    @property
    def extended(self):
        local = self._replicas // self._resolver.workers
        return types.SimpleNamespace(worker_devices=tuple(f"/cpu:{i}" for i in range(local)))


def _dataset(batch, policy):
    opts = tf.data.Options()
    opts.experimental_distribute.auto_shard_policy = policy
    return tf.data.Dataset.range(8).batch(batch).with_options(opts)


OFF = tf.data.experimental.AutoShardPolicy.OFF
AUTO = tf.data.experimental.AutoShardPolicy.AUTO


def test_auto_shard_off_on_two_workers_is_per_worker_data():
    assert global_batch.per_worker_batch(_Strategy(2, 2), _dataset(1, OFF)) == 1
    # and fit accepts its batch of 1 (refused before: "Use e.g. 2").
    global_batch.check_fit_input(_Strategy(2, 2), _dataset(1, OFF))


@pytest.mark.parametrize(
    "workers, replicas, policy",
    [(2, 2, AUTO), (1, 2, OFF)],
    ids=["auto_sharded", "one_worker"],
)
def test_other_datasets_keep_the_global_batch(workers, replicas, policy):
    assert global_batch.per_worker_batch(_Strategy(workers, replicas), _dataset(1, policy)) is None
    with pytest.raises(ValueError, match="global_batch_size=1"):
        global_batch.check_fit_input(_Strategy(workers, replicas), _dataset(1, policy))


def test_per_worker_batch_its_replicas_cannot_split_is_refused_with_advice():
    """2 workers x 2 replicas: a per-worker batch of 1 (global 2) is refused,
    naming the batch and suggesting 2 (upstream: "global_batch_size=1 ...
    Use e.g. 4", and a per-worker batch of 4 trained on half of each
    worker's examples)."""
    assert global_batch.per_worker_batch(_Strategy(2, 4), _dataset(1, OFF)) == 1
    with pytest.raises(
        ValueError,
        match=r"per-worker batch=1, replicas per worker=2, "
        r"num_workers=2 \(global batch 2\)\. Use e\.g\. 2\.",
    ):
        global_batch.check_fit_input(_Strategy(2, 4), _dataset(1, OFF))
    with pytest.raises(ValueError, match=r"Use e\.g\. 4 or 6\."):
        global_batch.check_fit_input(_Strategy(2, 4), _dataset(5, OFF))
    global_batch.check_fit_input(_Strategy(2, 4), _dataset(2, OFF))


def _pieces(strategy, dataset):
    return list(global_batch.per_worker_dataset_fn(strategy, dataset)(None))


def test_each_workers_batch_is_split_over_its_replicas():
    """Batches of 4, 4 and a last one of 2 on 2 replicas per worker: pieces of
    2 rows in order (replica 0, replica 1, replica 0, ...), every row once."""
    features = tf.reshape(tf.range(20), (10, 2))
    dataset = tf.data.Dataset.from_tensor_slices(({"x": features}, tf.range(10))).batch(4)
    pieces = _pieces(_Strategy(2, 4), dataset)
    assert [p[1].numpy().tolist() for p in pieces] == [[0, 1], [2, 3], [4, 5], [6, 7], [8], [9]]
    assert pieces[0][0]["x"].numpy().tolist() == [[0, 1], [2, 3]]


def test_ragged_and_sparse_batches_are_split_by_rows():
    ragged = tf.ragged.constant([[1], [2, 3], [], [4, 5, 6]])
    sparse = tf.sparse.from_dense(tf.constant([[1, 0], [0, 2], [3, 0], [0, 4]]))
    dataset = tf.data.Dataset.from_tensors((ragged, sparse))
    (r0, s0), (r1, s1) = _pieces(_Strategy(2, 4), dataset)
    assert r0.to_list() == [[1], [2, 3]] and r1.to_list() == [[], [4, 5, 6]]
    assert tf.sparse.to_dense(s0).numpy().tolist() == [[1, 0], [0, 2]]
    assert tf.sparse.to_dense(s1).numpy().tolist() == [[3, 0], [0, 4]]


def test_one_replica_per_worker_gets_each_batch_whole():
    dataset = _dataset(3, OFF)
    assert _pieces(_Strategy(2, 2), dataset)[0].numpy().tolist() == [0, 1, 2]


def test_first_batch_of_unknown_size_its_replicas_cannot_split_fails_naming_it():
    """A generator (Ray's `to_tf`): its batch is known at the first batch only."""
    signature = tf.TensorSpec((None,), tf.int64)
    dataset = tf.data.Dataset.from_generator(lambda: iter([[0], [1]]), output_signature=signature)
    with pytest.raises(tf.errors.InvalidArgumentError, match="Invalid per-worker batch"):
        _pieces(_Strategy(2, 4), dataset)
    # A last batch (not the first) may be uneven, as TF's rebatching splits it.
    dataset = tf.data.Dataset.from_generator(
        lambda: iter([[0, 1], [2]]), output_signature=signature
    )
    assert [p.numpy().tolist() for p in _pieces(_Strategy(2, 4), dataset)] == [[0], [1], [], [2]]
