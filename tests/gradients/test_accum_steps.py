"""grad_accum larger than the steps a fit runs is refused before step 1 (said aloud
where the length is unknown until the input runs out), never a silent no-op."""

import re

import keras
import numpy as np
import pytest
import tensorflow as tf
from absl import logging

from tfdist_opt import _logging
from tfdist_opt.data.options import PipelineOptions
from tfdist_opt.data.pipeline import build_dataset
from tfdist_opt.gradients.accumulation import contract
from tfdist_opt.strategy.build import opt_strategy


def test_contract_counts_the_steps_of_the_fit():
    assert "this fit runs 3 train step(s) (1 epoch(s) x 3" in (
        contract.check_updates_per_fit(4, 3, epochs=1)
    )
    assert "Received: grad_accum=8, steps_per_epoch=3, epochs=5" in (
        contract.check_updates_per_fit(8, 3, epochs=5, initial_epoch=3)
    )  # 6 < 8
    # Resuming a cycle with 2 micro-steps accumulated: 2 more steps update.
    assert "trains nothing" not in contract.check_updates_per_fit(
        4, 2, epochs=1, pending_micro_steps=2
    )
    assert "trains nothing" in contract.check_updates_per_fit(4, 2, epochs=1, pending_micro_steps=1)
    assert "fewer than grad_accum=4" in contract.check_updates_per_fit(4, 3, epochs=2)
    assert contract.check_updates_per_fit(4, 4, epochs=1) is None
    assert contract.check_updates_per_fit(4, None, epochs=1) is None  # unknown length
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


X = np.random.RandomState(0).rand(24, 4).astype("float32")  # 3 batches of 8
Y = X[:, :1]


class _Batches(keras.utils.PyDataset):
    def __init__(self, n=3):
        super().__init__()
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return X[8 * i : 8 * i + 8], Y[8 * i : 8 * i + 8]


def _generator(repeat):
    for _ in range(repeat):
        for i in range(3):
            yield X[8 * i : 8 * i + 8], Y[8 * i : 8 * i + 8]


def _dict_model(strategy):
    with strategy.scope():
        a = keras.Input((4,), name="a")
        m = keras.Model({"a": a}, keras.layers.Dense(1)(a))
        m.compile(keras.optimizers.SGD(0.1), "mse")
    return m


# Every input kind Keras 3 fit accepts, each 3 steps per epoch (known length).
KNOWN_LENGTH = {
    "arrays": lambda s: ((X, Y), {"batch_size": 8}),
    "dict_of_arrays": lambda s: (({"a": X}, Y), {"batch_size": 8}),
    "tf_data": lambda s: ((_ds(3),), {}),
    "py_dataset": lambda s: ((_Batches(),), {}),
    "generator_with_steps_per_epoch": lambda s: ((_generator(9),), {"steps_per_epoch": 3}),
    "tf_data_unknown_cardinality_with_steps_per_epoch": lambda s: (
        (_ds(3).filter(lambda x, y: True).repeat(),),
        {"steps_per_epoch": 3},
    ),
    "build_dataset": lambda s: (
        (build_dataset((X, Y), s, 8, options=PipelineOptions(shuffle=False)),),
        {},
    ),
    "distributed_dataset": lambda s: ((s.experimental_distribute_dataset(_ds(3)),), {}),
}


@pytest.mark.parametrize("kind", sorted(KNOWN_LENGTH))
def test_fit_shorter_than_grad_accum_raises_before_step_one(strategy, kind):
    model = _dict_model(strategy) if kind == "dict_of_arrays" else _model(strategy)
    before = [w.numpy().copy() for w in model.weights]
    seen = []
    cb = keras.callbacks.LambdaCallback(on_train_batch_begin=lambda b, logs=None: seen.append(b))
    args, kwargs = KNOWN_LENGTH[kind](strategy)
    with pytest.raises(
        ValueError,
        match=(
            r"Invalid value for `grad_accum`: this fit runs 3 train step\(s\) "
            r"\(1 epoch\(s\) x 3 step\(s\) per epoch\) but grad_accum=4"
        ),
    ):
        model.fit(*args, epochs=1, verbose=0, callbacks=[cb], **kwargs)
    assert seen == []  # no step ran
    assert int(model.optimizer._iterations.numpy()) == 0
    for w, b in zip(model.weights, before):
        np.testing.assert_array_equal(w.numpy(), b)


def test_a_fit_that_completes_a_restored_cycle_runs(strategy):
    model = _model(strategy)
    model.fit(_ds(3), epochs=2, verbose=0)  # 6 micro-steps: 1 update, 2 pending
    model.fit(_ds(2), epochs=1, verbose=0)  # 2 more complete the cycle
    assert int(model.optimizer.iterations.numpy()) == 2
    with pytest.raises(ValueError, match=r"Received: grad_accum=4, steps_per_epoch=2, epochs=1"):
        model.fit(_ds(2), epochs=1, verbose=0)  # 0 pending: 2 < 4


def test_unknown_length_is_checked_after_the_first_epoch(monkeypatch):
    warned = []
    monkeypatch.setattr(logging, "warning", lambda msg, *a: warned.append(msg % a if a else msg))
    monkeypatch.setattr(_logging, "_LOGGED", set())
    model = _model(opt_strategy(cpu_replicas=2, grad_accum=16, all_reduce="reduce_to_one"))
    unknown = _ds(1).filter(lambda x, y: True)  # cardinality unknown
    # Keras learns the length when the first epoch runs out (under a
    # distribute strategy the fetch that finds the end counts as a step).
    with pytest.warns(
        UserWarning,
        match=(
            r"this fit runs \d train step\(s\) \(3 epoch\(s\) x \d step\(s\) per "
            r"epoch\) but grad_accum=16"
        ),
    ):
        model.fit(unknown, epochs=3, verbose=0)
    assert int(model.optimizer.iterations.numpy()) == 0
    assert any("input has no known length" in w for w in warned)


def test_short_epochs_warn_but_train_across_epochs(strategy, monkeypatch):
    warned = []
    monkeypatch.setattr(logging, "warning", lambda msg, *a: warned.append(msg % a if a else msg))
    model = _model(strategy)
    model.fit(_ds(3), epochs=2, verbose=0)  # 6 micro-steps: 1 update
    assert int(model.optimizer.iterations.numpy()) == 1
    assert any("an epoch has 3 step(s), fewer than grad_accum=4" in w for w in warned)
    model.evaluate(_ds(2), verbose=0)  # evaluation is not checked


def test_following_the_batch_contract_advice_trains_like_one_device():
    # A dataset batch the replicas cannot split is refused before step 1 with
    # "a dataset batch that is a multiple of N"; a batch that follows that
    # advice trains: 4 micro-steps of 6 examples (3 per replica), 2 updates
    # on the mean gradient of 12, as one device stepping on batches of 12.
    x = np.random.RandomState(1).rand(24, 4).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    strategy = opt_strategy(cpu_replicas=2, grad_accum=2)
    model = _model(strategy)
    start = [w.copy() for w in model.get_weights()]
    with pytest.raises(
        ValueError, match=r"Expected a dataset batch that is a multiple of (\d+)"
    ) as e:
        model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(5), epochs=1, verbose=0)
    multiple = int(re.search(r"a multiple of (\d+)", str(e.value)).group(1))
    batch = multiple * -(-5 // multiple)  # the advice: the next multiple of it
    model.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(batch), epochs=1, verbose=0)
    assert int(model.optimizer.iterations.numpy()) == 2

    reference = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    reference.compile(keras.optimizers.SGD(0.1), "mse")
    reference.set_weights(start)
    reference.fit(x, y, batch_size=12, epochs=1, shuffle=False, verbose=0)
    for got, want in zip(model.get_weights(), reference.get_weights()):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
