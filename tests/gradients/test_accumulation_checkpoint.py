"""Accumulators are optimizer variables: a mid-cycle checkpoint resumes mid-cycle.

2 virtual CPU replicas, grad_accum=4, SGD with momentum, 8 micro-steps (2
updates). What each test proves:
* `tf.train.Checkpoint(model, optimizer)` saved at micro-step 2 of 4 of the
  second cycle and restored into a fresh model + optimizer (fresh strategy)
  finishes with the weights of an uninterrupted run (rel 1e-6: the restored
  per-replica sums are sum/2 each, so float32 addition order differs), which
  itself equals two big-batch steps (rel 1e-5); zeroing the restored partial
  sums instead changes the result (the test can fail);
* the same through Keras `model.save` / `keras.models.load_model`;
* a learning-rate schedule sees updates, not micro-steps (equals big batch);
* the accumulators are ON_READ (per replica, never synced) and in
  `optimizer.variables`.
"""

import numpy as np
import pytest
import keras
import tensorflow as tf

from tfdist_opt.gradients.accumulation import accumulation
from tfdist_opt.strategy import opt_strategy

IN, K, MICRO, REPLICAS, STEPS = 16, 4, 4, 2, 8


def _data():
    rng = np.random.default_rng(0)
    n = MICRO * REPLICAS * STEPS
    x = rng.normal(size=(n, IN)).astype("float32")
    return x, (x[:, :1] * 0.5 - x[:, 2:3] + 0.1).astype("float32")


def _dataset(batch, skip=0, take=None):
    ds = tf.data.Dataset.from_tensor_slices(_data()).batch(batch, drop_remainder=True)
    ds = ds.skip(skip)
    return ds.take(take) if take is not None else ds


def _model(strategy, lr=0.1):
    with strategy.scope():
        model = keras.Sequential(
            [keras.Input((IN,)), keras.layers.Dense(32, activation="tanh"), keras.layers.Dense(1)]
        )
        rng = np.random.default_rng(1)
        model.set_weights(
            [rng.normal(size=w.shape).astype("float32") * 0.2 for w in model.get_weights()]
        )
        model.compile(keras.optimizers.SGD(lr, momentum=0.9), "mse")
        model.optimizer.build(model.trainable_variables)
    return model


def _accum_strategy():
    return opt_strategy(cpu_replicas=REPLICAS, grad_accum=K)


def _fit(model, **ds_args):
    model.fit(_dataset(MICRO * REPLICAS, **ds_args), epochs=1, verbose=0, shuffle=False)


def _max_rel(a, b):
    return max(float(np.abs(x - y).max() / (np.abs(y).max() + 1e-30)) for x, y in zip(a, b))


def _sums(model):
    return [a.numpy() for a in accumulation.accumulators_of(model.optimizer)]


@pytest.fixture(scope="module")
def full():
    """Weights after 8 uninterrupted micro-steps."""
    model = _model(_accum_strategy())
    _fit(model)
    return model.get_weights()


def test_checkpoint_mid_cycle_restores_partial_sums(tmp_path, full):
    big = _model(opt_strategy(cpu_replicas=REPLICAS))
    big.fit(_dataset(MICRO * REPLICAS * K), epochs=1, verbose=0, shuffle=False)
    assert int(big.optimizer.iterations.numpy()) == 2
    assert _max_rel(full, big.get_weights()) <= 1e-5  # k micro == one big step

    first = _model(_accum_strategy())
    accs = accumulation.accumulators_of(first.optimizer)
    assert len(accs) == len(first.trainable_variables)
    assert all(any(a is v for v in first.optimizer.variables) for a in accs)
    assert all(a.value.synchronization == tf.VariableSynchronization.ON_READ for a in accs)
    _fit(first, take=K + 2)  # one update, then micro-step 2 of 4
    assert int(first.optimizer.iterations.numpy()) == 1
    saved_sums = _sums(first)
    assert any(np.abs(s).max() > 0 for s in saved_sums)
    path = tf.train.Checkpoint(model=first, optimizer=first.optimizer).save(str(tmp_path / "ckpt"))

    def resume(zero_sums=False):
        model = _model(_accum_strategy())
        tf.train.Checkpoint(model=model, optimizer=model.optimizer).restore(
            path
        ).assert_existing_objects_matched()
        assert int(model.optimizer.iterations.numpy()) == 1
        assert int(model.optimizer._iterations.numpy()) == K + 2
        for got, want in zip(_sums(model), saved_sums):
            np.testing.assert_allclose(got, want, rtol=1e-6)
        if zero_sums:
            for a in accumulation.accumulators_of(model.optimizer):
                a.assign(tf.zeros(a.shape))
        _fit(model, skip=K + 2)
        assert int(model.optimizer.iterations.numpy()) == 2
        return model.get_weights()

    assert _max_rel(resume(), full) <= 1e-6
    assert _max_rel(resume(zero_sums=True), full) > 1e-4


def test_keras_save_mid_cycle_restores_partial_sums(tmp_path, full):
    first = _model(_accum_strategy())
    # One update, then micro-step 2 of 4 (a fit of 2 steps from a cycle
    # boundary trains nothing, and fit refuses it before step 1).
    _fit(first, take=K + 2)
    saved_sums = _sums(first)
    path = str(tmp_path / "mid.keras")
    first.save(path)
    strategy = _accum_strategy()
    with strategy.scope():
        model = keras.models.load_model(path)
    assert int(model.optimizer._iterations.numpy()) == K + 2
    for got, want in zip(_sums(model), saved_sums):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    _fit(model, skip=K + 2)  # 2 steps complete the restored cycle
    assert int(model.optimizer.iterations.numpy()) == 2
    assert _max_rel(model.get_weights(), full) <= 1e-6


def test_schedule_sees_updates_not_micro_steps():
    def schedule():
        return keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=1, decay_rate=0.2)

    big = _model(opt_strategy(cpu_replicas=REPLICAS), lr=schedule())
    big.fit(_dataset(MICRO * REPLICAS * K), epochs=1, verbose=0, shuffle=False)
    acc = _model(_accum_strategy(), lr=schedule())
    _fit(acc)
    assert _max_rel(acc.get_weights(), big.get_weights()) <= 1e-5
    assert abs(float(acc.optimizer.learning_rate.numpy()) - 0.1 * 0.2**2) < 1e-7
