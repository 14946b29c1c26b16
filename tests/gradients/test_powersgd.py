"""PowerSGD (compression="powersgd"): the plan, and Keras `fit` on 2 virtual CPU replicas.

What each test proves:
* plan: which gradients are compressed (rank >= 2 floats whose factors are
  >= C times smaller; C=0 every matrix; conv kernels as [prod(leading), last];
  IndexedSlices never), and the bytes a step sends;
* settings: bad values get the named error (GradientOptions, StrategyConfig,
  environment), before anything runs;
* full rank (R >= min(n, m), C=0) equals uncompressed training to rel 1e-5,
  from step 0 and with a start step (the tf.cond path), and with grad_accum
  (compressed once per update);
* rank 1: the weights really differ from uncompressed, and the sum of the
  applied updates plus the final residual (error buffers, summed over
  replicas) equals the sum of the true gradients (linear loss: its gradient
  does not depend on the weights) -- it fails without error feedback;
* the state is optimizer variables: error buffers ON_READ SUM, Q mirrored and
  equal to a seeded draw;
* bf16 factors: close to fp32 factors, not equal; mixed_float16 trains.
* resume (rank 1, start step 1): after 2 of 4 steps, a tf.train.Checkpoint
  (read before or after the optimizer is built) and a .keras file restore
  every replica's own residual exactly, and 2 more steps give weights EQUAL
  (bit for bit) to the uninterrupted run, also through
  DistributedBackupAndRestore; a plain-sum value (an older checkpoint) or
  another replica count restores sum / n on each replica.
"""

import contextlib

import numpy as np
import pytest
import keras
import tensorflow as tf

from tfdist_opt.gradients.powersgd import factor_ops
from tfdist_opt.gradients.binding import keras_binding
from tfdist_opt.gradients.powersgd import lowrank
from tfdist_opt.gradients.powersgd import powersgd
from tfdist_opt.gradients.options import GradientOptions
from tfdist_opt.keras import metric_logs
from tfdist_opt.strategy.config import StrategyConfig


def _psgd(**kw):
    kw.setdefault("powersgd_min_compression", 0)
    kw.setdefault("powersgd_start_step", 0)
    return GradientOptions(compression="powersgd", **kw)


# ------------------------------------------------------------------ pure
def test_plan_selects_matrices_and_counts_bytes():
    shapes = [(3, 3, 16, 32), (32,), (512, 10), (4, 3), (1000, 8)]
    p = powersgd.plan(
        shapes, ["float32", "float32", "float32", "float32", "int32"], rank=4, min_compression=2.0
    )
    assert [(m.index, m.rows, m.cols, m.rank) for m in p.matrices] == [
        (0, 144, 32, 4),
        (2, 512, 10, 4),
    ]
    assert p.rest == (1, 3, 4)
    assert p.dense_bytes == 4 * (144 * 32 + 32 + 5120 + 12 + 8000)
    assert p.sent_bytes == 4 * ((144 + 32) * 4 + 32 + (512 + 10) * 4 + 12 + 8000)
    every = powersgd.plan(shapes[:4], ["float32"] * 4, rank=8, min_compression=0)
    assert [(m.index, m.rank) for m in every.matrices] == [(0, 8), (2, 8), (3, 3)]
    sparse = powersgd.plan([(100, 100)], ["float32"], 1, 0, sparse=[True])
    assert sparse.matrices == () and sparse.rest == (0,)
    bf16 = powersgd.plan(shapes[:1], ["float32"], 4, 2.0, wire="bf16")
    assert bf16.sent_bytes == 2 * (144 + 32) * 4


@pytest.mark.parametrize(
    "kw, field",
    [
        (dict(powersgd_rank=0), "powersgd_rank"),
        (dict(powersgd_start_step=-1), "powersgd_start_step"),
        (dict(powersgd_min_compression=-0.5), "powersgd_min_compression"),
        (dict(powersgd_wire="int8"), "powersgd_wire"),
    ],
)
def test_bad_settings_are_named(kw, field):
    for make in (GradientOptions, StrategyConfig):
        with pytest.raises(ValueError, match=f"Invalid value for `{field}`.*Received: {field}="):
            make(compression="powersgd", **kw)


def test_settings_from_environment():
    cfg = StrategyConfig.load(
        environ={
            "TFDIST_OPT_COMPRESSION": "powersgd",
            "TFDIST_OPT_POWERSGD_RANK": "2",
            "TFDIST_OPT_POWERSGD_START_STEP": "10",
            "TFDIST_OPT_POWERSGD_MIN_COMPRESSION": "0",
            "TFDIST_OPT_POWERSGD_WIRE": "bf16",
        }
    )
    opts = GradientOptions.from_config(cfg)
    assert (
        opts.powersgd_rank,
        opts.powersgd_start_step,
        opts.powersgd_min_compression,
        opts.wire_dtype,
    ) == (2, 10, 0.0, "bfloat16")


# --------------------------------------------------- 2 virtual replicas
XS = (4, 4, 2)


def _data(n=128):
    rng = np.random.default_rng(0)
    return (rng.normal(size=(n, *XS)).astype("float32"), rng.normal(size=(n, 3)).astype("float32"))


def _fit(strategy, options, steps=4, k=1, dtype=None, skip=0):
    """Conv (kernel viewed as 18 x 4) + Dense (16 x 3), batch 32 per update."""
    keras_binding.attach(strategy, options)
    keras.utils.set_random_seed(1)
    x, y = _data()
    with strategy.scope():
        model = keras.Sequential(
            [
                keras.Input(XS),
                keras.layers.Conv2D(4, 3, activation="tanh", dtype=dtype),
                keras.layers.Flatten(dtype=dtype),
                keras.layers.Dense(3, dtype=dtype),
            ]
        )
        opt = keras.optimizers.SGD(0.1)
        if dtype == "mixed_float16":
            opt = keras.optimizers.LossScaleOptimizer(opt)
        model.compile(opt, "mse")
    if steps:
        model.fit(
            x[32 * skip : 32 * steps],
            y[32 * skip : 32 * steps],
            batch_size=32 // k,
            epochs=1,
            shuffle=False,
            verbose=0,
        )
    return model


def _max_rel(a, b):
    return max(float(np.abs(x - y).max() / (np.abs(y).max() + 1e-30)) for x, y in zip(a, b))


@pytest.fixture(scope="module")
def plain(strategy):
    return _fit(strategy, GradientOptions()).get_weights()


@pytest.mark.compat
@pytest.mark.parametrize("start", [0, 2])
def test_full_rank_equals_uncompressed(strategy, plain, start):
    model = _fit(strategy, _psgd(powersgd_rank=8, powersgd_start_step=start))
    state = lowrank.state_of(model.optimizer)
    assert [(m.rows, m.cols, m.rank) for m in state.plan.matrices] == [(18, 4, 4), (16, 3, 3)]
    assert _max_rel(model.get_weights(), plain) <= 1e-5
    for e in state.entries.values():
        assert e.error.value.synchronization == tf.VariableSynchronization.ON_READ
        assert any(e.error is v for v in model.optimizer.variables)
        assert any(e.q is v for v in model.optimizer.variables)


@pytest.mark.parametrize("k", [1, 2])
def test_a_step_is_two_collectives_with_the_rest_in_the_p_pack(strategy, monkeypatch, k):
    # Conv and Dense kernels compressed, their two biases not: the biases
    # ride in the P factors' collective, so the gradients cost exactly two
    # batch reductions (P + rest, then Q) and no replica-context all-reduce,
    # also once per update under grad_accum.
    calls = {"batch_reduce_to": [], "all_reduce": 0}
    batch_reduce_to = strategy.extended.batch_reduce_to

    def counting_batch_reduce_to(op, pairs, options=None):
        calls["batch_reduce_to"].append(len(pairs))
        return batch_reduce_to(op, pairs, options=options)

    all_reduce = tf.distribute.ReplicaContext.all_reduce

    def counting_all_reduce(self, *args, **kwargs):
        calls["all_reduce"] += 1
        return all_reduce(self, *args, **kwargs)

    monkeypatch.setattr(strategy.extended, "batch_reduce_to", counting_batch_reduce_to)
    monkeypatch.setattr(tf.distribute.ReplicaContext, "all_reduce", counting_all_reduce)
    # Only the gradients' collectives count: the per-batch metric logs sum
    # the metric variables with an all-reduce of their own (`metric_logs`).
    monkeypatch.setattr(metric_logs, "synced_step", lambda model, step: step)
    model = _fit(strategy, _psgd(powersgd_rank=8, grad_accum=k), steps=1, k=k)
    assert len(lowrank.state_of(model.optimizer).entries) == 2
    # One trace: [2 P factors + 2 biases] then [2 Q factors].
    assert calls == {"batch_reduce_to": [4, 2], "all_reduce": 0}


def test_skinny_products_run_through_xla_on_cpu(strategy, monkeypatch):
    # P = M Q, Q_i = (P^^T M)^T and P^ Q^T of every replica go through the
    # XLA-compiled matmul on CPU devices (oneDNN runs these rank-r products
    # far below memory bandwidth); the result is the same product.
    devices = []
    xla = factor_ops.xla_matmul

    def counting(a, b, transpose_b=False):
        devices.append(a.device)
        return xla(a, b, transpose_b=transpose_b)

    monkeypatch.setattr(factor_ops, "xla_matmul", counting)
    _fit(strategy, _psgd(powersgd_rank=2), steps=1)
    # 2 matrices x (P, Q_i, P^ Q^T) x each replica, traced once.
    assert len(devices) == 6 * strategy.num_replicas_in_sync
    a = tf.random.stateless_normal((300, 4), [1, 2])
    b = tf.random.stateless_normal((200, 4), [3, 4])
    m = tf.random.stateless_normal((300, 200), [5, 6])
    np.testing.assert_allclose(
        factor_ops.skinny_matmul(a, b, "/device:CPU:0", transpose_b=True),
        tf.matmul(a, b, transpose_b=True),
        rtol=1e-5,
        atol=1e-5,
    )
    np.testing.assert_allclose(
        factor_ops.skinny_matmul(a, m, "/device:CPU:0", transpose_a=True),
        tf.matmul(a, m, transpose_a=True),
        rtol=1e-5,
        atol=1e-4,
    )
    assert not factor_ops.is_cpu("/job:worker/task:0/device:GPU:0")


def test_full_rank_with_grad_accum_compresses_once_per_update(strategy):
    ref = _fit(strategy, GradientOptions(grad_accum=2), k=2)
    model = _fit(strategy, _psgd(powersgd_rank=8, powersgd_start_step=1, grad_accum=2), k=2)
    assert int(model.optimizer.iterations.numpy()) == 4
    assert _max_rel(model.get_weights(), ref.get_weights()) <= 1e-5


def test_low_rank_differs_and_bf16_factors_stay_close(strategy, plain):
    r1 = _fit(strategy, _psgd(powersgd_rank=1))
    assert _max_rel(r1.get_weights(), plain) > 1e-2
    full = _fit(strategy, _psgd(powersgd_rank=8)).get_weights()
    bf16 = _fit(strategy, _psgd(powersgd_rank=8, powersgd_wire="bf16")).get_weights()
    w0 = _fit(strategy, GradientOptions(), steps=0).get_weights()
    d_full = [a - b for a, b in zip(full, w0)]
    d_bf16 = [a - b for a, b in zip(bf16, w0)]
    assert 0 < _max_rel(d_bf16, d_full) <= 0.05  # a few bf16 roundings per step


def test_mixed_float16_full_rank(strategy):
    ref = _fit(strategy, GradientOptions(), dtype="mixed_float16")
    model = _fit(strategy, _psgd(powersgd_rank=8), dtype="mixed_float16")
    assert _max_rel(model.get_weights(), ref.get_weights()) <= 1e-3  # fp16 compute


def test_q_starts_from_the_shared_seed(strategy):
    model = _fit(strategy, _psgd(powersgd_rank=2, powersgd_start_step=100), steps=1)
    for j, e in enumerate(lowrank.state_of(model.optimizer).entries.values()):
        want = np.random.default_rng([0, j]).standard_normal((e.matrix.cols, 2))
        for q in strategy.experimental_local_results(e.q.value):
            np.testing.assert_array_equal(q.numpy(), want.astype("float32"))


def _residuals(strategy, model):
    return [
        [r.numpy() for r in strategy.experimental_local_results(e.error.value)]
        for e in lowrank.state_of(model.optimizer).entries.values()
    ]


def _continue(strategy, options, model, steps=4, skip=2):
    x, y = _data()
    model.fit(
        x[32 * skip : 32 * steps],
        y[32 * skip : 32 * steps],
        batch_size=32,
        epochs=1,
        shuffle=False,
        verbose=0,
    )
    return model.get_weights()


def test_resume_is_bit_for_bit(strategy, tmp_path):
    opts = _psgd(powersgd_rank=1, powersgd_start_step=1)
    whole = _fit(strategy, opts, steps=4).get_weights()
    first = _fit(strategy, opts, steps=2)
    saved = _residuals(strategy, first)
    assert all(not np.array_equal(a, b) for a, b in saved)  # replicas differ
    path = tf.train.Checkpoint(model=first, optimizer=first.optimizer).write(str(tmp_path / "ckpt"))
    first.save(tmp_path / "m.keras")

    for built in (True, False):  # False: a deferred restore, applied by build
        model = _fit(strategy, opts, steps=0)
        if built:
            model.optimizer.build(model.trainable_variables)
        status = tf.train.Checkpoint(model=model, optimizer=model.optimizer).read(path)
        if not built:
            with strategy.scope():
                model.optimizer.build(model.trainable_variables)
        status.assert_existing_objects_matched()
        for got, want in zip(_residuals(strategy, model), saved):
            for g, w in zip(got, want):
                np.testing.assert_array_equal(g, w)
        for a, b in zip(_continue(strategy, opts, model), whole):
            np.testing.assert_array_equal(a, b)

    with strategy.scope():
        loaded = keras.models.load_model(tmp_path / "m.keras")
    assert int(loaded.optimizer.iterations.numpy()) == 2
    for got, want in zip(_residuals(strategy, loaded), saved):
        for g, w in zip(got, want):
            np.testing.assert_array_equal(g, w)
    for a, b in zip(_continue(strategy, opts, loaded), whole):
        np.testing.assert_array_equal(a, b)

    # DistributedBackupAndRestore: a backup after step 2 of 4, killed after
    # step 3; a fresh model's fit restores it, skips 2 batches, runs 3-4.
    from tests.callbacks.test_backup import CrashAt
    from tfdist_opt.callbacks.backup import DistributedBackupAndRestore

    x, y = _data()
    for crash in ([CrashAt(3)], []):
        model = _fit(strategy, opts, steps=0)
        with pytest.raises(KeyboardInterrupt) if crash else contextlib.nullcontext():
            model.fit(
                tf.data.Dataset.from_tensor_slices((x, y)).batch(32),
                epochs=1,
                shuffle=False,
                verbose=0,
                callbacks=[DistributedBackupAndRestore(str(tmp_path / "bk"), save_freq=2)] + crash,
            )
    assert int(model.optimizer.iterations.numpy()) == 4
    for a, b in zip(model.get_weights(), whole):
        np.testing.assert_array_equal(a, b)


def test_restore_from_a_sum_or_another_replica_count_spreads_it(strategy):
    model = _fit(strategy, _psgd(powersgd_rank=1), steps=0)
    model.optimizer.build(model.trainable_variables)
    error = lowrank.state_of(model.optimizer).error_buffers[0]
    total = np.arange(np.prod(error.shape), dtype="float32").reshape(error.shape)
    for value in (total, np.stack([total / 4] * 4)):  # older sum; 4 replicas
        error._restore_from_tensors({"VARIABLE_VALUE": tf.constant(value)})
        for r in strategy.experimental_local_results(error.value):
            np.testing.assert_allclose(r.numpy(), total / 2, rtol=1e-6)
    with pytest.raises(
        ValueError,
        match=r"Invalid value for `.*tfdist_powersgd_error`.*"
        r"Received: shape=\(3,\)",
    ):
        error._restore_from_tensors({"VARIABLE_VALUE": tf.zeros([3])})


IN, OUT, LR, B = 12, 8, 0.1, 16


def test_updates_plus_residual_equal_sum_of_gradients(strategy):
    """Error feedback keeps what compression dropped: nothing is lost."""
    steps, start = 5, 2
    rng = np.random.default_rng(3)
    x = rng.normal(size=(B * steps, IN)).astype("float32")
    y = rng.normal(size=(B * steps, OUT)).astype("float32")
    keras_binding.attach(strategy, _psgd(powersgd_rank=1, powersgd_start_step=start))
    with strategy.scope():
        model = keras.Sequential([keras.Input((IN,)), keras.layers.Dense(OUT, use_bias=False)])
        model.compile(
            keras.optimizers.SGD(LR), lambda t, p: keras.ops.mean(t * p, axis=-1)
        )  # linear in weights
    w0 = model.get_weights()[0]
    model.fit(x, y, batch_size=B, epochs=1, shuffle=False, verbose=0)
    applied = (w0 - model.get_weights()[0]) / LR
    (entry,) = lowrank.state_of(model.optimizer).entries.values()
    residual = entry.error.numpy()  # ON_READ SUM: the sum over replicas
    true = sum(x[i : i + B].T @ y[i : i + B] / (B * OUT) for i in range(0, B * steps, B))
    assert np.abs(residual).max() > 1e-3 * np.abs(true).max()  # compression was lossy
    np.testing.assert_allclose(applied + residual, true, rtol=1e-5, atol=1e-6)


def test_parameter_server_and_tf_keras_refuse_powersgd(monkeypatch):
    import tfdist_opt
    from tfdist_opt.strategy.plan import plan_strategy
    from tfdist_opt.strategy.topology import Topology

    cluster = {"chief": ["localhost:2000"], "worker": ["localhost:2001"], "ps": ["localhost:2002"]}
    with pytest.raises(
        ValueError,
        match=r"`grad_accum`/`compression` with mode "
        r"parameter_server.*compression='powersgd'",
    ):
        plan_strategy(
            StrategyConfig(compression="powersgd"),
            Topology(tf_config={"cluster": cluster, "task": {"type": "chief", "index": 0}}),
        )
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", "1")
    with pytest.raises(
        ValueError,
        match=r"Invalid value for `compression` with tf_keras "
        r"\(TF_USE_LEGACY_KERAS=1\).*Received: compression='powersgd'",
    ):
        tfdist_opt.opt_strategy(cpu_replicas=2, compression="powersgd")


def test_info_explains_powersgd(monkeypatch):
    from tfdist_opt.cli import info

    monkeypatch.setenv("TFDIST_OPT_COMPRESSION", "powersgd")
    monkeypatch.setenv("TFDIST_OPT_POWERSGD_RANK", "2")
    text = info.format_text(info.collect())
    assert "gradients    : PowerSGD rank 2 from update 100" in text


def test_a_gradient_shared_by_every_replica_is_each_ones_component(strategy):
    # benchmarks/allreduce.py hands every replica the same tensor object,
    # which merge_call passes on as that one tensor (not per replica): the
    # step used to index a second component and raise IndexError.
    keras_binding.attach(strategy, _psgd(powersgd_rank=2))
    with strategy.scope():
        v = [keras.Variable(tf.zeros((8, 4))), keras.Variable(tf.zeros((4,)))]
        opt = keras.optimizers.SGD(0.0)
        opt.build(v)
        g = [tf.ones((8, 4)), tf.ones((4,))]

    @tf.function
    def step():
        pairs = list(zip(g, [x.value for x in v]))
        return strategy.run(lambda: [r for r, _ in opt._all_reduce_sum_gradients(pairs)])

    for got, want in zip(step(), (2 * np.ones((8, 4)), 2 * np.ones(4))):
        for x in strategy.experimental_local_results(got):
            np.testing.assert_allclose(x.numpy(), want, rtol=1e-5)
