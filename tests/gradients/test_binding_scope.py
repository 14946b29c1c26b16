"""The gradient hooks are bound per optimizer, never process-wide.

What each test proves:
* after an opt_strategy with compression + accumulation trained, a plain
  `tf.distribute.MirroredStrategy` in the same process trains bit-identically
  to a run before any hook existed, with an optimizer of the original class,
  and no Keras optimizer class holds a tfdist_opt function;
* only optimizers created in the hooked scope are hooked (not one created
  outside it, even if built inside it, nor a `LossScaleOptimizer`
  wrapper), and the hooked class serializes as the
  original;
* a changed upstream signature (a monkeypatched fake) makes `attach` fail
  naming the method and Keras 3.15; every listed upstream method exists now.
"""

import inspect

import numpy as np
import pytest
import keras
import tensorflow as tf
from keras.src.backend.tensorflow.optimizer import TFOptimizer

from tfdist_opt.gradients.binding import hooks
from tfdist_opt.gradients.binding import keras_binding
from tfdist_opt.seam import upstream
from tfdist_opt.gradients.options import GradientOptions
from tfdist_opt.strategy import opt_strategy

IN = 8


def _data(n=64):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, IN)).astype("float32")
    return x, (x[:, :1] * 0.7 - x[:, 1:2]).astype("float32")


def _train(strategy, batch=16):
    x, y = _data()
    with strategy.scope():
        model = keras.Sequential(
            [keras.Input((IN,)), keras.layers.Dense(16, activation="tanh"), keras.layers.Dense(1)]
        )
        rng = np.random.default_rng(1)
        model.set_weights(
            [rng.normal(size=w.shape).astype("float32") * 0.3 for w in model.get_weights()]
        )
        model.compile(keras.optimizers.SGD(0.05, momentum=0.9), "mse")
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch, drop_remainder=True)
    model.fit(ds, epochs=2, verbose=0, shuffle=False)
    return model


def _plain_mirrored():
    return tf.distribute.MirroredStrategy(
        ["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice()
    )


def _tfdist_functions_on_keras_classes():
    found = []
    for cls in keras.optimizers.SGD.__mro__:
        for name, value in vars(cls).items():
            fn = value.fget if isinstance(value, property) else value
            if (getattr(fn, "__module__", None) or "").startswith("tfdist_opt"):
                found.append(f"{cls.__name__}.{name}")
    return found


def test_plain_mirrored_strategy_gets_upstream_keras():
    originals = {
        name: vars(TFOptimizer).get(name)
        for name in ("_all_reduce_sum_gradients", "build", "apply")
    }
    before = _train(_plain_mirrored())
    assert type(before.optimizer) is keras.optimizers.SGD

    hooked = _train(opt_strategy(cpu_replicas=2, compression="bf16", grad_accum=2), batch=8)
    assert hooks.is_hooked(hooked.optimizer)
    assert isinstance(hooked.optimizer, keras.optimizers.SGD)

    after = _train(_plain_mirrored())
    assert type(after.optimizer) is keras.optimizers.SGD
    assert not hooks.is_hooked(after.optimizer)
    for a, b in zip(after.get_weights(), before.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert any(
        not np.array_equal(a, b)  # the hooked run really differed
        for a, b in zip(hooked.get_weights(), before.get_weights())
    )
    for name, fn in originals.items():
        assert vars(TFOptimizer).get(name) is fn, name
    assert TFOptimizer._all_reduce_sum_gradients is originals["_all_reduce_sum_gradients"]
    assert _tfdist_functions_on_keras_classes() == []


def test_only_optimizers_created_in_the_hooked_scope_are_hooked():
    strategy = opt_strategy(cpu_replicas=2, compression="bf16")
    outside = keras.optimizers.SGD(0.1)
    with strategy.scope():
        inside = keras.optimizers.Adam(1e-3)
        by_name = keras.optimizers.get("sgd")
        wrapped = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1))
        model = keras.Sequential([keras.Input((IN,)), keras.layers.Dense(1)])
        model.compile(outside, "mse")
        outside.build(model.trainable_variables)  # built inside: still not ours
    assert hooks.is_hooked(inside) and hooks.is_hooked(by_name)
    assert hooks.state_of(inside).options.compression == "bf16"
    assert not hooks.is_hooked(outside) and type(outside) is keras.optimizers.SGD
    assert not hooks.is_hooked(wrapped) and hooks.is_hooked(wrapped.inner_optimizer)
    # Serialized as the original class: a saved model loads without tfdist_opt.
    assert type(inside).__name__ == "Adam"
    config = keras.optimizers.serialize(inside)
    assert config["class_name"] == "Adam"
    assert type(keras.optimizers.deserialize(config)) is keras.optimizers.Adam
    hooks.unhook(inside)
    assert type(inside) is keras.optimizers.Adam and not hooks.is_hooked(inside)


def test_detach_leaves_new_optimizers_upstream():
    strategy = opt_strategy(cpu_replicas=2, compression="fp16")
    keras_binding.detach(strategy)
    assert "scope" not in vars(strategy)
    with strategy.scope():
        opt = keras.optimizers.SGD(0.1)
    assert type(opt) is keras.optimizers.SGD


def test_changed_upstream_signature_fails_loudly(monkeypatch):
    upstream.check()  # the installed Keras passes

    def fake(self, grads):  # lost `trainable_variables`
        raise AssertionError("never called")

    monkeypatch.setattr(TFOptimizer, "_backend_apply_gradients", fake)
    s = _plain_mirrored()
    with pytest.raises(
        RuntimeError,
        match=r"checked against Keras 3\.12-3\.15.*"
        r"TFOptimizer\._backend_apply_gradients",
    ):
        keras_binding.attach(s, GradientOptions(grad_accum=2))
    monkeypatch.undo()
    monkeypatch.delattr(TFOptimizer, "_all_reduce_sum_gradients")
    with pytest.raises(RuntimeError, match=r"_all_reduce_sum_gradients.*found None"):
        upstream.check()
    # Default options never touch Keras internals.
    keras_binding.attach(s, GradientOptions())
    assert "scope" not in vars(s)


def test_every_listed_upstream_method_exists_with_its_signature():
    for name, params, _ in upstream.SIGNATURES:
        method = getattr(TFOptimizer, name)
        assert tuple(inspect.signature(method).parameters) == params, name
    with _plain_mirrored().scope():
        opt = keras.optimizers.SGD(0.1)
        opt.build([keras.Variable(np.zeros(2, "float32"))])
    for name in ("_distribution_strategy", "_iterations", "_trainable_variables", "_learning_rate"):
        assert hasattr(opt, name), name


def test_checked_methods_come_from_the_private_api_registry():
    from tfdist_opt import private_api

    listed = {
        e.attr: e.params
        for e in private_api.ENTRIES
        if e.owner == private_api.TF_OPTIMIZER and e.params is not None
    }
    assert {name: params for name, params, _ in upstream.SIGNATURES} == listed
    assert {"build", "apply", "_all_reduce_sum_gradients", "_backend_apply_gradients"} <= set(
        listed
    )
