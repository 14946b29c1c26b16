"""Keras 3 `fit` through opt_strategy on 2 virtual CPU replicas (in-process).

What each test proves:
* packing: `bytes_per_pack="auto"` (several packs) and a tiny fixed pack size
  give bit-identical weights to TF's default single pack;
* compression: bf16/fp16 weight updates stay within precision.compression_rtol
  of fp32 and differ from it (the cast really happened);
* fp16 + mixed_float16 + LossScaleOptimizer at gradients whose fp16 sum would
  overflow: finite and close with pre-division, non-finite without it;
* accumulation: k=4 micro-batches == one step at batch 4b (SGD) to rel 1e-5,
  weights unchanged for 3 micro-steps then updated, iterations once per k;
  Adam state advances once per k too (equals the big-batch Adam run);
* the batch contract raises before step 1 with the numbers.
"""

import numpy as np
import pytest
import keras
import tensorflow as tf

from tfdist_opt.gradients.collectives import collectives
from tfdist_opt.gradients.binding import keras_binding
from tfdist_opt.gradients.collectives import precision
from tfdist_opt.gradients.options import GradientOptions
from tfdist_opt.strategy.build import opt_strategy

IN, HID = 64, 512  # ~1.2 MB of gradients: several "auto" packs


def _data(n=128, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, IN)).astype("float32")
    y = (x[:, :1] * 0.5 + rng.normal(size=(n, 1)) * 0.1).astype("float32")
    return x, y


def _init_weights(seed=1):
    rng = np.random.default_rng(seed)
    return [
        rng.normal(size=(IN, HID)).astype("float32") * 0.05,
        np.zeros(HID, "float32"),
        rng.normal(size=(HID, HID)).astype("float32") * 0.03,
        np.zeros(HID, "float32"),
        rng.normal(size=(HID, 1)).astype("float32") * 0.03,
        np.zeros(1, "float32"),
    ]


def _model():
    return keras.Sequential(
        [
            keras.Input((IN,)),
            keras.layers.Dense(HID, activation="tanh"),
            keras.layers.Dense(HID, activation="tanh"),
            keras.layers.Dense(1),
        ]
    )


class _Record(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.kernels = []

    def on_train_batch_end(self, batch, logs=None):
        self.kernels.append(self.model.layers[-1].kernel.numpy().copy())


def _fit(strategy, batch, epochs=1, opt=None, n=128, callbacks=()):
    x, y = _data(n)
    with strategy.scope():
        model = _model()
        model.set_weights(_init_weights())
        model.compile(opt() if opt else keras.optimizers.SGD(0.05), "mse")
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch, drop_remainder=True)
    model.fit(ds, epochs=epochs, verbose=0, shuffle=False, callbacks=list(callbacks))
    return model


def _weights(model):
    return [w.copy() for w in model.get_weights()]


def _max_rel(a, b):
    return max(float(np.abs(x - y).max() / (np.abs(y).max() + 1e-30)) for x, y in zip(a, b))


def test_packing_on_off_gives_identical_weights():
    ref = _weights(_fit(opt_strategy(cpu_replicas=2), 32))
    auto = _weights(_fit(opt_strategy(cpu_replicas=2, bytes_per_pack="auto"), 32))
    assert any(not np.array_equal(a, b) for a, b in zip(ref, _init_weights()))
    for a, b in zip(ref, auto):
        np.testing.assert_array_equal(a, b)
    # The "auto" policy really made several packs for these shapes.
    tensors = [tf.zeros(w.shape) for w in _init_weights()]
    assert len(collectives.Packing("auto").buckets(tensors)) >= 2


def test_tiny_fixed_packs_identical_to_one_pack_in_replica_context():
    strategy = opt_strategy(cpu_replicas=2)
    grads = [
        np.random.default_rng(i).normal(size=s).astype("float32")
        for i, s in enumerate([(7, 5), (300,), (2, 3, 4), ()])
    ]

    def run(bytes_per_pack, wire_dtype=None):
        layer = collectives.Collectives(
            strategy, collectives.Codec(wire_dtype), collectives.Packing(bytes_per_pack)
        )

        def fn():
            rid = tf.distribute.get_replica_context().replica_id_in_sync_group
            local = [tf.constant(g) * tf.cast(rid + 1, tf.float32) for g in grads]
            return layer.all_reduce_sum(local)

        out = strategy.run(tf.function(fn))
        return [strategy.experimental_local_results(o)[0].numpy() for o in out]

    one = run(0, "bfloat16")
    tiny = run(16, "bfloat16")
    plain = run(0)
    for a, b, g in zip(one, tiny, grads):
        np.testing.assert_array_equal(a, b)
    for p, g in zip(plain, grads):
        np.testing.assert_allclose(p, 3 * g, rtol=1e-6)
    assert len(collectives.Packing(16).buckets([tf.constant(g) for g in grads])) == 4


@pytest.mark.parametrize("compression,wire", [("bf16", "bfloat16"), ("fp16", "float16")])
def test_compression_within_precision_bound(compression, wire):
    w0 = _init_weights()
    ref = _weights(_fit(opt_strategy(cpu_replicas=2), 32))
    got = _weights(_fit(opt_strategy(cpu_replicas=2, compression=compression), 32))
    steps = 128 // 32
    rtol = precision.compression_rtol(wire, 2, steps)
    d_ref = [r - w for r, w in zip(ref, w0)]
    d_got = [g - w for g, w in zip(got, w0)]
    err = _max_rel(d_got, d_ref)
    assert err <= rtol, (err, rtol)
    assert any(not np.array_equal(a, b) for a, b in zip(ref, got))  # it did cast


@pytest.fixture
def float32_policy_after():
    yield
    keras.mixed_precision.set_global_policy("float32")


def _fit_large_grads(options):
    """mixed_float16 + LossScaleOptimizer; local gradient ~4e4 per replica."""
    strategy = opt_strategy(cpu_replicas=2, mixed_precision="mixed_float16")
    keras_binding.attach(strategy, options)
    x = np.ones((8, 2), "float32")
    y = np.full((8, 1), -4e4, "float32")
    with strategy.scope():
        model = keras.Sequential(
            [
                keras.Input((2,)),
                keras.layers.Dense(2, kernel_initializer="identity", use_bias=False),
                keras.layers.Dense(1, kernel_initializer="zeros", use_bias=False, dtype="float32"),
            ]
        )
        opt = keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(1e-7), initial_scale=1.0)
        model.compile(opt, "mse")
    assert model.layers[0].compute_dtype == "float16"
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(4)
    model.fit(ds, epochs=1, verbose=0, shuffle=False)
    return _weights(model)


def test_fp16_no_overflow_with_mixed_float16(float32_policy_after):
    ref = _fit_large_grads(GradientOptions())
    got = _fit_large_grads(GradientOptions(compression="fp16"))
    bad = _fit_large_grads(GradientOptions(compression="fp16", predivide=False))
    assert all(np.isfinite(w).all() for w in got)
    assert np.abs(ref[1]).max() > 1e-3  # it trained
    assert _max_rel(got, ref) <= precision.compression_rtol("float16", 2, 2)
    assert not all(np.isfinite(w).all() for w in bad)  # the sum did overflow


def test_accumulation_equals_big_batch_sgd():
    b, k = 4, 4  # micro-batch per replica; dataset batch = b x 2 replicas
    big = _fit(opt_strategy(cpu_replicas=2), b * k * 2)
    rec = _Record()
    acc = _fit(opt_strategy(cpu_replicas=2, grad_accum=k), b * 2, callbacks=[rec])
    assert _max_rel(_weights(acc), _weights(big)) <= 1e-5
    assert int(acc.optimizer.iterations.numpy()) == int(big.optimizer.iterations.numpy()) == 4
    k0 = _init_weights()[4]
    for i in range(k - 1):  # unchanged for k-1 micro-steps, then updated
        np.testing.assert_array_equal(rec.kernels[i], k0)
    assert not np.array_equal(rec.kernels[k - 1], k0)
    np.testing.assert_array_equal(rec.kernels[k], rec.kernels[k - 1])


def test_accumulation_advances_adam_state_once_per_k():
    adam = lambda: keras.optimizers.Adam(1e-3)  # noqa: E731
    big = _fit(opt_strategy(cpu_replicas=2), 32, opt=adam)
    acc = _fit(opt_strategy(cpu_replicas=2, grad_accum=4), 8, opt=adam)
    assert int(acc.optimizer.iterations.numpy()) == 4
    w0 = _init_weights()
    err = _max_rel(
        [a - w for a, w in zip(_weights(acc), w0)], [g - w for g, w in zip(_weights(big), w0)]
    )
    # Adam divides by sqrt(v): coordinates with near-zero gradients amplify
    # float32 summation-order differences, so the *updates* agree to 1e-3
    # (measured 1.1e-4). Were m, v or the bias correction advanced per
    # micro-step, the updates would differ by O(1) (each Adam step moves
    # every weight by ~lr).
    assert err <= 1e-3, err


def test_batch_contract_checked_before_step_one():
    strategy = opt_strategy(cpu_replicas=2, grad_accum=4)
    x, y = _data(20)
    with strategy.scope():
        model = _model()
        model.compile(keras.optimizers.SGD(0.1), "mse")
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(5, drop_remainder=True)
    with pytest.raises(ValueError, match=r"dataset batch=5, grad_accum=4, num_replicas=2"):
        model.fit(ds, epochs=1, verbose=0)
    assert int(model.optimizer.iterations.numpy()) == 0


def test_keras_own_accumulation_refused_with_ours():
    strategy = opt_strategy(cpu_replicas=2, grad_accum=2)
    with strategy.scope():
        model = _model()
        model.compile(keras.optimizers.SGD(0.1, gradient_accumulation_steps=2), "mse")
    x, y = _data(16)
    with pytest.raises(ValueError, match="gradient_accumulation_steps=2"):
        model.fit(x, y, batch_size=8, epochs=1, verbose=0)


def test_attach_replaces_and_detach_restores():
    s = tf.distribute.MirroredStrategy(
        ["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice()
    )
    upstream = s.experimental_distribute_dataset
    keras_binding.attach(s, GradientOptions(grad_accum=2))
    first = s.experimental_distribute_dataset
    keras_binding.attach(s, GradientOptions(grad_accum=4))
    assert keras_binding.options_of(s).grad_accum == 4
    assert s.experimental_distribute_dataset is not first  # replaced, not stacked
    keras_binding.detach(s)
    assert keras_binding.options_of(s) is None
    assert s.experimental_distribute_dataset == upstream
