"""grad_accum larger than the steps a fit runs is said aloud, never a silent no-op."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from absl import logging

from tfdist_opt.gradients import contract
from tfdist_opt.strategy.build import opt_strategy


def test_contract_counts_the_steps_of_the_fit():
    assert "this fit runs 3 train step(s) (1 epoch(s) x 3" in (
        contract.check_updates_per_fit(4, 3, epochs=1))
    assert "Received: grad_accum=8, steps_per_epoch=3, epochs=5" in (
        contract.check_updates_per_fit(8, 3, epochs=5, initial_epoch=3))  # 6 < 8
    # Resuming a cycle with 2 micro-steps accumulated: 2 more steps update.
    assert "trains nothing" not in contract.check_updates_per_fit(
        4, 2, epochs=1, pending_micro_steps=2)
    assert "trains nothing" in contract.check_updates_per_fit(
        4, 2, epochs=1, pending_micro_steps=1)
    assert "fewer than grad_accum=4" in contract.check_updates_per_fit(4, 3, epochs=2)
    assert contract.check_updates_per_fit(4, 4, epochs=1) is None
    assert contract.check_updates_per_fit(4, None, epochs=1) is None   # unknown length
    assert contract.check_updates_per_fit(1, 1, epochs=1) is None


@pytest.fixture(scope="module")
def strategy():
    return opt_strategy(cpu_replicas=2, grad_accum=4, all_reduce="reduce_to_one")


def _model(strategy):
    with strategy.scope():
        m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        m.compile(keras.optimizers.SGD(0.1), "mse")
    return m


def _ds(batches):
    x = np.random.RandomState(0).rand(8 * batches, 4).astype("float32")
    return tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(8)


def test_fit_shorter_than_grad_accum_warns_before_step_one(strategy):
    model, seen = _model(strategy), []
    cb = keras.callbacks.LambdaCallback(on_train_batch_begin=lambda b, logs=None: seen.append(b))
    with pytest.warns(UserWarning, match=r"grad_accum=4 applies an optimizer update only every 4"):
        model.fit(_ds(3), epochs=1, verbose=0, callbacks=[cb])
    assert int(model.optimizer.iterations.numpy()) == 0


def test_short_epochs_warn_but_train_across_epochs(strategy, monkeypatch):
    warned = []
    monkeypatch.setattr(logging, "warning", lambda msg, *a: warned.append(msg % a if a else msg))
    model = _model(strategy)
    model.fit(_ds(3), epochs=2, verbose=0)                 # 6 micro-steps: 1 update
    assert int(model.optimizer.iterations.numpy()) == 1
    assert any("an epoch has 3 step(s), fewer than grad_accum=4" in w for w in warned)
    model.evaluate(_ds(2), verbose=0)                      # evaluation is not checked
