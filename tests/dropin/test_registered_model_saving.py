"""A registered custom model built under our strategy saves and loads again.

Keras writes `keras.saving.get_registered_name(type(model))` into the saved
config; the per-instance class swap (`tfdist_opt._class_swap`) must keep
the registered name (`tfdist_dropin>MyModel`), and the name must still load
the user's class. In-process: one device and 2 virtual replicas
(tests/conftest.py); tests/multiworker/test_dropin_inputs.py covers 2
workers.
"""

import json

import keras
import numpy as np
import pytest

import tfdist_opt
from tfdist_opt import _class_swap

PACKAGE = "tfdist_dropin"


@keras.saving.register_keras_serializable(PACKAGE)
class MyModel(keras.Model):
    """The keras.io pattern: a registered subclassed model with a config."""

    def __init__(self, units=3, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.dense = keras.layers.Dense(
            units, kernel_initializer=keras.initializers.GlorotUniform(seed=1)
        )

    def call(self, x):
        return self.dense(x)

    def get_config(self):
        return {"units": self.units, **super().get_config()}


@keras.saving.register_keras_serializable(PACKAGE)
class MyDense(keras.layers.Dense):
    """A registered custom layer inside a functional model."""


pytestmark = pytest.mark.usefixtures("no_tf_config")


def _data():
    rng = np.random.RandomState(0)
    return rng.randn(16, 4).astype("float32"), rng.randn(16, 3).astype("float32")


@pytest.mark.parametrize("replicas", [None, 2], ids=["one_device", "two_replicas"])
def test_registered_subclassed_model_round_trips(replicas, tmp_path):
    strategy = tfdist_opt.opt_strategy(cpu_replicas=replicas)
    x, y = _data()
    with strategy.scope():
        model = MyModel(units=3)
        model.compile(keras.optimizers.SGD(0.1), "mse")
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    # The swap happened (else this test guards nothing) and kept the name.
    assert type(model) is not MyModel and isinstance(model, MyModel)
    assert keras.saving.get_registered_name(type(model)) == f"{PACKAGE}>MyModel"
    assert json.loads(model.to_json())["registered_name"] == f"{PACKAGE}>MyModel"
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert type(loaded) is MyModel
    assert loaded.units == 3
    np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0), atol=1e-6)
    # The registered name still loads the user's class, not the swapped one.
    assert keras.saving.get_registered_object(f"{PACKAGE}>MyModel") is MyModel


@pytest.mark.parametrize("replicas", [None, 2], ids=["one_device", "two_replicas"])
def test_functional_model_with_registered_layer_round_trips(replicas, tmp_path):
    strategy = tfdist_opt.opt_strategy(cpu_replicas=replicas)
    x, y = _data()
    with strategy.scope():
        inputs = keras.Input((4,))
        model = keras.Model(inputs, MyDense(3)(inputs))
        model.compile(keras.optimizers.SGD(0.1), "mse")
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert type(loaded.layers[-1]) is MyDense
    np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0), atol=1e-6)


class _MixinA:
    pass


class _MixinB:
    pass


def test_a_second_swap_keeps_the_name_and_the_loaded_class():
    first = _class_swap.cached_subclass(_MixinA, MyModel)
    second = _class_swap.cached_subclass(_MixinB, first)
    for cls in (first, second):
        assert keras.saving.get_registered_name(cls) == f"{PACKAGE}>MyModel"
    assert keras.saving.get_registered_object(f"{PACKAGE}>MyModel") is MyModel
