"""Models built under our strategies are known where Keras builds them (no heap scan)."""

import threading
import types

import keras
import numpy as np

from tfdist_opt import private_api
from tfdist_opt.strategy.saving import chief_saving
from tfdist_opt.keras import keras_steps
from tfdist_opt.keras import model_registry


def _functional():
    i = keras.Input((4,))
    return keras.Model(i, keras.layers.Dense(1)(keras.layers.Dense(3)(i)))


class Sub(keras.Model):
    def __init__(self):
        super().__init__()
        self.d = keras.layers.Dense(1)

    def call(self, x):
        return self.d(x)


def test_every_model_kind_built_in_scope_gets_its_subclass(strategy):
    with strategy.scope():
        functional = _functional()
        sequential = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        lazy = keras.Sequential([keras.layers.Dense(2)])
        sub = Sub()
        lazy.compile("sgd", "mse")
        sub.compile("sgd", "mse")
    assert isinstance(functional, keras_steps.KerasSteps)
    assert isinstance(sequential, keras_steps.KerasSteps)
    # Built by nothing yet: `fit` builds them inside strategy.scope(), before
    # the train function is made.
    for model, width in ((lazy, 2), (sub, 1)):
        model.fit(np.ones((8, 4), "float32"), np.ones((8, width), "float32"), verbose=0)
        assert isinstance(model, keras_steps.KerasSteps)


def test_models_of_other_strategies_and_outside_scopes_are_not_taken(strategy):
    outside = _functional()
    other = types.SimpleNamespace()
    with model_registry.recording():
        built = _functional()
    built._distribute_strategy = other
    assert model_registry.take(strategy) == []
    assert model_registry.take(other) == [built]
    assert model_registry.take(other) == []  # handed over once
    assert outside not in model_registry.take(None)


def test_recording_restores_keras_name_scope_stack():
    before = private_api.name_scope_stack()
    with keras.name_scope("outer"):
        with model_registry.recording():
            with model_registry.recording():  # nested: one recorder
                inner = private_api.name_scope_stack()
                _functional()
            assert private_api.name_scope_stack() is inner
        assert type(private_api.name_scope_stack()) is list
        assert [s.name for s in private_api.name_scope_stack()] == ["outer"]
    assert private_api.name_scope_stack() in (before, [])


def test_adopting_while_another_thread_fills_a_tuple(strategy):
    # A heap scan (gc.get_objects / gc.get_referrers) handed out a tuple a
    # thread was still filling (SystemError, then a SIGSEGV at scope exit);
    # the registry holds only the models Keras built.
    done = []

    def fill():
        yield 0
        with strategy.scope():
            _functional()
        yield 1

    t = threading.Thread(target=lambda: done.append(tuple(fill())))
    t.start()
    t.join(60)
    assert done == [(0, 1)]


def test_plain_strategy_scope_adopts_nothing():
    import tensorflow as tf

    with tf.distribute.OneDeviceStrategy("/cpu:0").scope():
        model = _functional()
    assert type(model) is keras.Model or type(model).__name__ == "Functional"
    assert not isinstance(model, keras_steps.KerasSteps)
    assert chief_saving.adopt_models(tf.distribute.get_strategy()) == 0
