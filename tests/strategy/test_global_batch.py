"""`fit` refuses a tf.data global batch the replicas do not divide, before step 1.

3 replicas on the session's virtual CPU devices (tests/conftest.py): a
batch of 8 would be split 3, 3, 2 and its examples weighted unequally.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfdist_opt
from tfdist_opt.keras import global_batch

RTOL = 1e-5


@pytest.fixture(scope="module")
def three():
    s = tfdist_opt.opt_strategy(cpu_replicas=3, mode="mirrored", all_reduce="reduce_to_one")
    assert s.num_replicas_in_sync == 3
    return s


def _data(n):
    rng = np.random.default_rng(0)
    return (rng.normal(size=(n, 4)).astype("float32"), rng.normal(size=(n, 1)).astype("float32"))


def _model(strategy):
    with strategy.scope():
        keras.utils.set_random_seed(1)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(keras.optimizers.SGD(0.1), "mse")
    return model


@pytest.mark.parametrize("drop_remainder", [True, False])
def test_indivisible_batch_is_refused_before_step_one(three, drop_remainder):
    ds = tf.data.Dataset.from_tensor_slices(_data(16)).batch(8, drop_remainder=drop_remainder)
    model = _model(three)
    before = model.get_weights()
    with pytest.raises(
        ValueError,
        match=(
            r"Invalid value for `global_batch_size`: expected a multiple of "
            r"the number of replicas in sync \(3\).*Received: "
            r"global_batch_size=8 \(the batch of the tf.data dataset given to "
            r"`fit`.*num_replicas=3, num_workers=1. Use e.g. 6 or 9"
        ),
    ):
        model.fit(ds, epochs=1, verbose=0)
    assert int(model.optimizer.iterations.numpy()) == 0
    for a, b in zip(before, model.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_divisible_batch_trains_as_one_device(three):
    ds = tf.data.Dataset.from_tensor_slices(_data(18)).batch(9)
    ref = _model(tfdist_opt.opt_strategy(mode="one_device"))
    ref.fit(ds, epochs=2, verbose=0)
    model = _model(three)
    model.fit(ds, epochs=2, verbose=0)
    assert int(model.optimizer.iterations.numpy()) == 4
    for a, b in zip(ref.get_weights(), model.get_weights()):
        np.testing.assert_allclose(b, a, rtol=RTOL, atol=1e-7)


def test_last_partial_batch_trains_as_documented(three):
    """22 = 9 + 9 + 4: the last batch (4; TF splits it 2, 2, 0) is not refused.

    Its step weighs its examples as the module documents: each replica's
    mean loss over 2 examples, scaled by 1/3, is 1/6 an example where one
    device gives 1/4. So the run equals one device's with the last 4
    examples weighted 4/6, and not the unweighted one.
    """
    x, y = _data(22)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(9)
    model = _model(three)
    model.fit(ds, epochs=1, verbose=0)
    assert int(model.optimizer.iterations.numpy()) == 3
    weights = np.ones(22, "float32")
    weights[18:] = 4 / 6
    one = tfdist_opt.opt_strategy(mode="one_device")
    weighted, plain = _model(one), _model(one)
    weighted.fit(tf.data.Dataset.from_tensor_slices((x, y, weights)).batch(9), epochs=1, verbose=0)
    plain.fit(ds, epochs=1, verbose=0)
    for a, b in zip(weighted.get_weights(), model.get_weights()):
        np.testing.assert_allclose(b, a, rtol=RTOL, atol=1e-7)
    assert not all(
        np.allclose(a, b, rtol=1e-3) for a, b in zip(plain.get_weights(), model.get_weights())
    )


@pytest.mark.parametrize(
    "make,expected",
    [
        (lambda d: d.batch(8), 8),
        (lambda d: d.batch(8, drop_remainder=True).map(lambda x: x * 2), 8),
        (lambda d: d.map(lambda x: x * 2).shuffle(4).batch(8).prefetch(1), 8),
        (lambda d: d.padded_batch(8), 8),
        (lambda d: d.batch(8).map(lambda x: x[:2]), None),  # map may change it
        (lambda d: d, None),  # no batch
        (lambda d: d.batch(8).unbatch(), None),
    ],
)
def test_dataset_global_batch(make, expected):
    ds = make(tf.data.Dataset.range(20))
    assert global_batch.dataset_global_batch(ds) == expected
