"""keras_steps: `jit_compile=True` per replica, its fallback, generator input.

In-process, 2 Mirrored replicas on the session's virtual CPUs
(tests/conftest.py). Tolerance against `jit_compile=False` and against one
device without a strategy: rel 1e-5, abs 1e-6 (float32; XLA fuses and
reorders operations, and the all-reduce sums in another order; measured
~8e-7 relative after 8 SGD steps). Under mixed_float16: rel 1e-3, abs 1e-4
(float16's eps is ~1e-3, and XLA keeps some float16 intermediates at
another precision than the plain step, by the CPU's instruction set: one
host measured 2.1e-5 abs, 9.7e-4 rel, another passed at 1e-5).
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfdist_opt
from tfdist_opt.keras import keras_steps
from tfdist_opt.keras import xla_steps
from tfdist_opt.strategy.config import StrategyConfig

RTOL, ATOL = 1e-5, 1e-6
F16_RTOL, F16_ATOL = 1e-3, 1e-4
N, BATCH = 64, 16


@pytest.fixture(autouse=True)
def _no_tf_config(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    for name in list(__import__("os").environ):
        if name.startswith("TFDIST_OPT_"):
            monkeypatch.delenv(name)


def _data():
    rng = np.random.RandomState(0)
    return (rng.randn(N, 8).astype("float32"), rng.randint(0, 3, size=(N,)).astype("int32"))


def _fit(strategy, *, jit=False, sync_bn=False, data=None, steps=None):
    x, y = _data()
    with strategy.scope():
        init = lambda s: keras.initializers.GlorotUniform(seed=s)
        layers = [
            keras.Input((8,)),
            keras.layers.Dense(16, activation="relu", kernel_initializer=init(1)),
        ]
        if sync_bn:
            layers.append(keras.layers.BatchNormalization(synchronized=True, name="sync_bn"))
        layers.append(keras.layers.Dense(3, kernel_initializer=init(2)))
        model = keras.Sequential(layers)
        model.compile(
            keras.optimizers.SGD(0.1),
            keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
            jit_compile=jit,
        )
    if data is None:
        history = model.fit(x, y, batch_size=BATCH, epochs=2, shuffle=False, verbose=0)
    else:
        history = model.fit(data, steps_per_epoch=steps, epochs=2, verbose=0)
    evaluation = model.evaluate(x, y, batch_size=BATCH, verbose=0, return_dict=True)
    return model, history.history, evaluation


def _close(a, b, rtol=RTOL, atol=ATOL):
    for u, v in zip(a.get_weights(), b.get_weights()):
        np.testing.assert_allclose(u, v, rtol=rtol, atol=atol)


def _record_xla_traces(monkeypatch):
    """Per traced replica step: whether its function is marked for XLA.

    `_XlaMustCompile` is the attribute `tf.function(jit_compile=True)` puts
    on the function it traces; TF's runtime compiles such a function with
    XLA (or fails), so a step without it ran uncompiled.
    """
    traced = []
    original = xla_steps._why_not_compilable

    def record(fn, data):
        reason = original(fn, data)
        if reason is not None:  # falls back: the function never runs
            return reason
        attr = fn.get_concrete_function(data).function_def.attr
        traced.append("_XlaMustCompile" in attr and attr["_XlaMustCompile"].b)
        return reason

    monkeypatch.setattr(xla_steps, "_why_not_compilable", record)
    return traced


def test_jit_compile_runs_per_replica_and_equals_no_jit(monkeypatch):
    traced = _record_xla_traces(monkeypatch)
    strategy = tfdist_opt.opt_strategy(cpu_replicas=2)
    jit, jit_hist, jit_eval = _fit(strategy, jit=True)
    plain, plain_hist, plain_eval = _fit(strategy)
    single, _, _ = _fit(tf.distribute.get_strategy())
    # Both replicas traced a train step and a test step, each marked for XLA.
    assert traced == [True] * 4
    assert jit.jit_compile is True
    _close(jit, plain)
    _close(jit, single)
    np.testing.assert_allclose(jit_hist["loss"], plain_hist["loss"], rtol=RTOL)
    np.testing.assert_allclose(jit_eval["loss"], plain_eval["loss"], rtol=RTOL)
    assert type(jit).__name__ == "Sequential"


def test_uncompilable_stage_warns_once_naming_the_layer_and_trains():
    strategy = tfdist_opt.opt_strategy(cpu_replicas=2)
    with pytest.warns(keras_steps.XlaFallbackWarning) as caught:
        jit, _, _ = _fit(strategy, jit=True, sync_bn=True)
    messages = [
        str(w.message) for w in caught if issubclass(w.category, keras_steps.XlaFallbackWarning)
    ]
    assert len(messages) == 1, messages
    assert "train step" in messages[0] and "'sync_bn'" in messages[0]
    assert "jit_fallback='warn'" in messages[0]
    plain, _, _ = _fit(strategy, sync_bn=True)
    _close(jit, plain)


def test_jit_fallback_error_raises_before_any_step():
    strategy = tfdist_opt.opt_strategy(cpu_replicas=2, jit_fallback="error")
    with pytest.raises(
        keras_steps.UnsupportedCombinationError,
        match=r"Unsupported combination: jit_compile=True .* "
        r"train step .* layer 'sync_bn'",
    ):
        _fit(strategy, jit=True, sync_bn=True)


def test_jit_fallback_is_validated():
    with pytest.raises(
        ValueError,
        match=r"Invalid value for `jit_fallback`.*"
        r"Received: jit_fallback='never'",
    ):
        StrategyConfig(jit_fallback="never")
    assert StrategyConfig.load(environ={"TFDIST_OPT_JIT_FALLBACK": "error"}).jit_fallback == "error"


def test_generator_input_under_a_strategy_equals_plain_keras():
    x, y = _data()

    def batches():
        while True:
            for i in range(0, N, BATCH):
                yield x[i : i + BATCH], y[i : i + BATCH]

    steps = N // BATCH
    plain, plain_hist, _ = _fit(tf.distribute.get_strategy(), data=batches(), steps=steps)
    for strategy in (tfdist_opt.opt_strategy(), tfdist_opt.opt_strategy(cpu_replicas=2)):
        model, hist, _ = _fit(strategy, data=batches(), steps=steps)
        _close(model, plain)
        np.testing.assert_allclose(hist["loss"], plain_hist["loss"], rtol=RTOL)


def test_jit_with_loss_scaling_equals_no_jit(monkeypatch):
    """mixed_float16: the LossScaleOptimizer's apply runs outside XLA too."""
    traced = _record_xla_traces(monkeypatch)
    strategy = tfdist_opt.opt_strategy(cpu_replicas=2)
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        jit, _, _ = _fit(strategy, jit=True)
        plain, _, _ = _fit(strategy)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert traced == [True] * 4  # train and test step, 2 replicas, under XLA
    assert isinstance(jit.optimizer, keras.optimizers.LossScaleOptimizer)
    assert int(jit.optimizer.iterations.numpy()) == 8
    _close(jit, plain, rtol=F16_RTOL, atol=F16_ATOL)
