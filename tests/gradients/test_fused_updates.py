"""fused_updates: Keras's SGD / Adam steps as one TF kernel, same numbers.

On 2 virtual CPU replicas, the same hooked gradient path (packing through
our hook) trains 20 steps with `fused_updates` on and off; the weights and
the optimizer slots agree to rel 1e-6 (float rounding: the kernels may
contract multiply-adds; Adam to abs 5e-6, see ATOL), and the train step's graph really holds the fused
kernel (so the comparison cannot pass by running Keras's ops twice). An
optimizer subclass with its own `update_step` keeps it.
"""

import numpy as np
import pytest
import keras
import tensorflow as tf

from tfdist_opt.gradients.binding import fused_updates
from tfdist_opt.gradients.binding import keras_binding
from tfdist_opt.gradients.options import GradientOptions
from tfdist_opt.strategy.config import StrategyConfig

RTOL = 1e-6
# Adam divides by sqrt(v) + 1e-7: a rounding difference in sqrt or the
# division moves a weight by up to ~1e-6 over 20 steps of lr 0.01 (each
# step moves it by ~1e-2), measured 9.5e-7.
ATOL = {"adam": 5e-6, "adam_amsgrad": 5e-6}
HOOKED = dict(bytes_per_pack=1 << 20, via_hook=True)  # our path, no compression


def _train(strategy, make_optimizer, fused, steps=20):
    keras_binding.attach(strategy, GradientOptions(fused_updates=fused, **HOOKED))
    keras.utils.set_random_seed(3)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32 * steps, 6)).astype("float32")
    y = rng.normal(size=(32 * steps, 2)).astype("float32")
    with strategy.scope():
        model = keras.Sequential(
            [keras.Input((6,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(2)]
        )
        model.compile(make_optimizer(), "mse")
    model.fit(x, y, batch_size=32, epochs=1, shuffle=False, verbose=0)
    graph_ops = set()
    for f in _concrete_functions(model):
        graph_ops |= {op.type for op in f.graph.get_operations()}
        for inner in f.graph._functions.values():  # pylint: disable=protected-access
            graph_ops |= {n.op for n in inner.definition.node_def}
    state = [v.numpy() for v in model.optimizer.variables if "iteration" not in v.path]
    return model.get_weights(), state, graph_ops


def _concrete_functions(model):
    out = []
    for candidate in _tf_functions(model):
        out.extend(candidate._list_all_concrete_functions())  # pylint: disable=protected-access
    return out


def _tf_functions(model):
    # Keras wraps its tf.function (one_step_on_data) in a Python closure.
    found, stack, seen = [], [model.train_function], set()
    while stack:
        f = stack.pop()
        if id(f) in seen:
            continue
        seen.add(id(f))
        if isinstance(f, tf.types.experimental.PolymorphicFunction):
            found.append(f)
            continue
        for cell in getattr(f, "__closure__", None) or ():
            try:
                value = cell.cell_contents
            except ValueError:
                continue
            if callable(value):
                stack.append(value)
    return found


CASES = {
    "sgd_momentum": (
        lambda: keras.optimizers.SGD(0.05, momentum=0.9),
        "ResourceApplyKerasMomentum",
    ),
    "sgd_nesterov": (
        lambda: keras.optimizers.SGD(0.05, momentum=0.9, nesterov=True),
        "ResourceApplyKerasMomentum",
    ),
    "sgd_plain": (lambda: keras.optimizers.SGD(0.05), "ResourceApplyGradientDescent"),
    "adam": (lambda: keras.optimizers.Adam(0.01), "ResourceApplyAdam"),
    "adam_amsgrad": (
        lambda: keras.optimizers.Adam(0.01, amsgrad=True),
        "ResourceApplyAdamWithAmsgrad",
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_fused_equals_keras_ops(strategy, name):
    make, kernel = CASES[name]
    w_keras, s_keras, ops_keras = _train(strategy, make, fused=False)
    w_fused, s_fused, ops_fused = _train(strategy, make, fused=True)
    assert kernel in ops_fused, sorted(o for o in ops_fused if "Apply" in o)
    assert kernel not in ops_keras
    assert w_fused and s_fused
    for a, b in zip(w_fused + s_fused, w_keras + s_keras):
        np.testing.assert_allclose(a, b, rtol=RTOL, atol=ATOL.get(name, 1e-7))
    # And training moved the weights (a test that cannot fail is a defect).
    w0, _, _ = _train(strategy, make, fused=True, steps=1)
    assert any(not np.allclose(a, b) for a, b in zip(w0, w_fused))


def test_an_own_update_step_is_kept(strategy):
    class Halved(keras.optimizers.SGD):
        def update_step(self, gradient, variable, learning_rate):
            super().update_step(gradient * 0.5, variable, learning_rate)

    assert fused_updates.kind_of(keras.optimizers.SGD()) == "sgd"
    assert fused_updates.kind_of(Halved()) is None
    # AdamW keeps Adam's step (its decay is a separate op Keras runs first).
    assert fused_updates.kind_of(keras.optimizers.AdamW()) == "adam"
    _, _, ops = _train(strategy, lambda: Halved(0.05, momentum=0.9), fused=True, steps=2)
    assert "ResourceApplyKerasMomentum" not in ops


def test_config_field():
    assert StrategyConfig().fused_updates is True
    assert GradientOptions.from_config(StrategyConfig(fused_updates=False)).fused_updates is False
    with pytest.raises((TypeError, ValueError), match="fused_updates"):
        StrategyConfig(fused_updates="yes")
