"""`global_batch.per_worker_batch`: which datasets are per-worker data.

A `tf.data` dataset with auto-sharding OFF on several workers (one replica
each) is per-worker data: each worker's batch is its share of the global
batch, so `fit` accepts a per-worker batch of 1 on 2 workers (Ray Train's
`to_tf(batch_size=1)`), where it refused it before. The 2-worker training
is in tests/multiworker/test_dropin_inputs.py.
"""

import pytest
import tensorflow as tf

from tfdist_opt.strategy import global_batch


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
    [(2, 2, AUTO), (1, 2, OFF), (2, 4, OFF)],
    ids=["auto_sharded", "one_worker", "two_replicas_per_worker"],
)
def test_other_datasets_keep_the_global_batch(workers, replicas, policy):
    assert global_batch.per_worker_batch(_Strategy(workers, replicas), _dataset(1, policy)) is None
    with pytest.raises(ValueError, match="global_batch_size=1"):
        global_batch.check_fit_input(_Strategy(workers, replicas), _dataset(1, policy))
