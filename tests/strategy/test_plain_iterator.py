"""`plain_iterator`: one CPU replica per worker reads a plain tf.data iterator.

In-process, on a one-device MirroredStrategy (TF's same input classes as a
multi-worker worker with one replica; the multi-worker runs themselves are
tests/multiworker, whose Keras matrix compares every cell with one process):
the iterator holds no MultiDeviceIterator and yields the batches TF's own
path yields, with the same partial last batch.
"""

import pytest
import tensorflow as tf

from tfdist_opt.keras import plain_iterator


@pytest.fixture(scope="module")
def one_cpu():
    return tf.distribute.MirroredStrategy(["/cpu:0"])


def _components(iterator):
    workers = iterator._iterators  # pylint: disable=protected-access
    return [type(w._iterator).__name__ for w in workers]  # pylint: disable=protected-access


def _values(strategy, distributed):
    return [
        [v.numpy().tolist() for v in strategy.experimental_local_results(x)] for x in distributed
    ]


def test_one_cpu_replica_gets_a_plain_iterator_with_the_same_batches(one_cpu):
    ds = tf.data.Dataset.range(10).batch(3)  # a partial last batch
    upstream = one_cpu.experimental_distribute_dataset(ds)
    plain = plain_iterator.apply(one_cpu, one_cpu.experimental_distribute_dataset(ds))
    assert _components(iter(upstream)) == ["OwnedMultiDeviceIterator"]
    assert _components(iter(plain)) == ["OwnedIterator"]
    assert (
        _values(one_cpu, plain)
        == _values(one_cpu, upstream)
        == [[[0, 1, 2]], [[3, 4, 5]], [[6, 7, 8]], [[9]]]
    )


def test_datasets_from_a_function_too(one_cpu):
    make = lambda ctx: tf.data.Dataset.range(6).batch(2)
    plain = plain_iterator.apply(one_cpu, one_cpu.distribute_datasets_from_function(make))
    assert _components(iter(plain)) == ["OwnedIterator"]
    assert _values(one_cpu, plain) == [[[0, 1]], [[2, 3]], [[4, 5]]]


def test_callers_options_and_several_replicas_keep_tfs_path(one_cpu, strategy):
    ds = tf.data.Dataset.range(8).batch(4)
    options = tf.distribute.InputOptions()
    mine = plain_iterator.apply(one_cpu, one_cpu.experimental_distribute_dataset(ds, options))
    assert _components(iter(mine)) == ["OwnedMultiDeviceIterator"]
    two = plain_iterator.apply(strategy, strategy.experimental_distribute_dataset(ds))
    assert strategy.num_replicas_in_sync == 2
    assert _components(iter(two)) == ["OwnedMultiDeviceIterator"]


def test_one_options_object_for_every_dataset(one_cpu):
    """TF compares iterator specs by the options' identity: Keras's step
    function would retrace for each new dataset otherwise."""
    ds = tf.data.Dataset.range(4).batch(2)
    a, b = (
        plain_iterator.apply(one_cpu, one_cpu.experimental_distribute_dataset(ds)) for _ in range(2)
    )
    assert a._options is b._options  # pylint: disable=protected-access
    assert iter(a)._type_spec == iter(b)._type_spec  # pylint: disable=protected-access


def test_an_accelerator_replica_keeps_tfs_path():
    """Only a CPU replica: on a GPU the MultiDeviceIterator copies to the device."""

    class Extended:
        worker_devices = ("/job:worker/replica:0/task:0/device:GPU:0",)

    class OnGpu:
        extended = Extended()

    assert not plain_iterator.one_cpu_replica(OnGpu())
    Extended.worker_devices = ("/job:worker/replica:0/task:0/device:CPU:0",)
    assert plain_iterator.one_cpu_replica(OnGpu())
