"""shard_optimizer_state (ZeRO stage 1) on virtual CPU replicas, in-process.

What each test proves (a 4-7-1 MLP, 4 steps, batch 8; the (4, 7) kernel and
the biases are sharded by rows and written in place, the (7, 1) kernel flat
and assigned whole):
* Adam and SGD+momentum: weights equal the unsharded run (rel 1e-6), every
  slot is a flat 1/n shard, optimizer-state bytes per replica drop;
* the same with gather buckets of 64 bytes (`shard_bucket_bytes`), which
  splits the (4, 7) kernel's shards row by row over several gathers;
* swapping the two replicas' slot shards after step 1 (a shard updated with
  another shard's state) breaks that equality: the comparison can fail;
* checkpoints hold full slots: tf.train.Checkpoint sharded -> unsharded,
  unsharded -> sharded, 2 -> 4 replicas, and model.save / load_model, each
  then trains 2 more steps equal to an uninterrupted run (rel 1e-6);
* bf16 compression and mixed_float16 (LossScaleOptimizer's inner optimizer
  is sharded) give the unsharded run's weights;
* the refusals (PowerSGD, grad_accum, Adafactor) name the field.
"""

import numpy as np
import pytest
import keras
import tensorflow as tf

from tfdist_opt.gradients.zero import sharded_state
from tfdist_opt.strategy import StrategyConfig, opt_strategy

IN, BATCH, STEPS = 4, 8, 4


def _strategy(shard, replicas=2, **kw):
    # The unsharded runs keep Keras's update ops too (fused_updates would
    # round Adam differently, ~1e-5 rel): what differs is the sharding only.
    kw.setdefault("fused_updates", False)
    return opt_strategy(
        cpu_replicas=replicas,
        mode="mirrored",
        all_reduce="reduce_to_one",
        shard_optimizer_state=shard,
        **kw,
    )


def _data():
    x = np.random.default_rng(0).normal(size=(BATCH * 8, IN)).astype("float32")
    return x, (x[:, :1] * 0.5 - x[:, 2:3]).astype("float32")


def _model(strategy, opt="adam"):
    with strategy.scope():
        model = keras.Sequential(
            [keras.Input((IN,)), keras.layers.Dense(7, activation="tanh"), keras.layers.Dense(1)]
        )
        rng = np.random.default_rng(1)
        model.set_weights([rng.normal(size=w.shape).astype("float32") for w in model.get_weights()])
        optimizer = (
            keras.optimizers.Adam(0.01)
            if opt == "adam"
            else keras.optimizers.SGD(0.1, momentum=0.9)
        )
        model.compile(optimizer, "mse")
        model.optimizer.build(model.trainable_variables)
    return model


def _fit(model, steps=STEPS, skip=0):
    x, y = _data()
    lo, hi = skip * BATCH, (skip + steps) * BATCH
    model.fit(x[lo:hi], y[lo:hi], batch_size=BATCH, epochs=1, verbose=0, shuffle=False)


def _max_rel(a, b):
    return max(float(np.abs(x - y).max() / (np.abs(y).max() + 1e-30)) for x, y in zip(a, b))


@pytest.fixture(scope="module")
def unsharded():
    out = {}
    for opt in ("adam", "sgd"):
        model = _model(_strategy(False), opt)
        _fit(model)
        out[opt] = model.get_weights()
    return out


@pytest.mark.compat
@pytest.mark.parametrize("opt", ["adam", "sgd"])
def test_same_math_and_one_nth_of_the_state(opt, unsharded):
    plain = _model(_strategy(False), opt)
    model = _model(_strategy(True), opt)
    slots = [v for v in model.optimizer.variables if sharded_state.is_sharded(v)]
    assert len(slots) == (4 if opt == "sgd" else 8)
    for v in slots:
        assert v.shape.rank == 1 and len(v.value.values) == 2
    assert sharded_state.state_bytes_per_replica(
        model.optimizer
    ) < 0.6 * sharded_state.state_bytes_per_replica(plain.optimizer)
    _fit(model)
    assert _max_rel(model.get_weights(), unsharded[opt]) < 1e-6


def test_small_gather_buckets_split_variables_same_math(unsharded):
    model = _model(_strategy(True, shard_bucket_bytes=64))
    _fit(model)
    assert _max_rel(model.get_weights(), unsharded["adam"]) < 1e-6


def test_a_shard_updated_with_the_other_shards_state_fails(unsharded):
    model = _model(_strategy(True), "adam")
    _fit(model, steps=1)
    for v in model.optimizer.variables:
        if sharded_state.is_sharded(v):
            a, b = v.value.values
            va, vb = a.numpy(), b.numpy()
            a.assign(vb)
            b.assign(va)
    _fit(model, steps=STEPS - 1, skip=1)
    assert _max_rel(model.get_weights(), unsharded["adam"]) > 1e-4


@pytest.mark.parametrize(
    "first,second", [((True, 2), (False, 2)), ((False, 2), (True, 2)), ((True, 2), (True, 4))]
)
def test_checkpoint_resumes_in_any_layout(tmp_path, unsharded, first, second):
    model = _model(_strategy(first[0], first[1]))
    _fit(model, steps=2)
    path = tf.train.Checkpoint(model=model, optimizer=model.optimizer).write(str(tmp_path / "ckpt"))
    resumed = _model(_strategy(second[0], second[1]))
    tf.train.Checkpoint(model=resumed, optimizer=resumed.optimizer).read(path).assert_consumed()
    for a, b in zip(resumed.optimizer.variables, model.optimizer.variables):
        full = sharded_state.full_value if sharded_state.is_sharded(a) else (lambda v: v.numpy())
        fb = sharded_state.full_value if sharded_state.is_sharded(b) else (lambda v: v.numpy())
        np.testing.assert_array_equal(np.asarray(full(a)), np.asarray(fb(b)))
    _fit(resumed, steps=2, skip=2)
    assert _max_rel(resumed.get_weights(), unsharded["adam"]) < 1e-6


def test_model_save_holds_full_state(tmp_path, unsharded):
    model = _model(_strategy(True))
    _fit(model, steps=2)
    model.save(tmp_path / "m.keras")
    strategy = _strategy(False)
    with strategy.scope():
        loaded = keras.models.load_model(tmp_path / "m.keras")
    shapes = [tuple(v.shape) for v in loaded.optimizer.variables]
    assert (7, 1) in shapes and (IN, 7) in shapes
    _fit(loaded, steps=2, skip=2)
    assert _max_rel(loaded.get_weights(), unsharded["adam"]) < 1e-6


def test_bf16_compression_composes():
    plain, model = (
        _model(_strategy(False, compression="bf16")),
        _model(_strategy(True, compression="bf16")),
    )
    _fit(plain)
    _fit(model)
    assert _max_rel(model.get_weights(), plain.get_weights()) < 1e-6


def test_mixed_precision_shards_the_inner_optimizer():
    out = []
    try:
        for shard in (False, True):
            strategy = _strategy(shard, mixed_precision="mixed_float16")
            model = _model(strategy)
            assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
            _fit(model)
            out.append(model)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    inner = out[1].optimizer.inner_optimizer
    assert any(sharded_state.is_sharded(v) for v in inner.variables)
    assert _max_rel(out[1].get_weights(), out[0].get_weights()) < 1e-6


@pytest.mark.parametrize(
    "kw,field",
    [
        ({"compression": "powersgd"}, "compression"),
        ({"grad_accum": 2}, "grad_accum"),
        ({"shard_optimizer_state": "yes"}, "shard_optimizer_state"),
        ({"shard_bucket_bytes": -1}, "shard_bucket_bytes"),
    ],
)
def test_config_refusals_name_the_field(kw, field):
    kw = {"shard_optimizer_state": True, **kw}
    with pytest.raises((ValueError, TypeError), match=f"`{field}`"):
        StrategyConfig(**kw)


def test_config_from_env():
    cfg = StrategyConfig.load(environ={"TFDIST_OPT_SHARD_OPTIMIZER_STATE": "1"})
    assert cfg.shard_optimizer_state is True


def test_adafactor_is_refused():
    strategy = _strategy(True)
    with strategy.scope():
        optimizer = keras.optimizers.Adafactor()
        with pytest.raises(NotImplementedError, match="Adafactor"):
            optimizer.build([keras.Variable(np.zeros((3, 4), "float32"))])


def test_parameter_server_and_tf_keras_refuse_it(monkeypatch):
    from tfdist_opt.strategy.plan import plan_strategy
    from tfdist_opt.strategy.topology import Topology

    tf_config = {
        "cluster": {"chief": ["h:1"], "worker": ["h:2"], "ps": ["h:3"]},
        "task": {"type": "chief", "index": 0},
    }
    with pytest.raises(
        ValueError,
        match="`shard_optimizer_state` with mode "
        "parameter_server.*Received: shard_optimizer_state=True",
    ):
        plan_strategy(StrategyConfig(shard_optimizer_state=True), Topology(tf_config=tf_config))
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", "1")
    with pytest.raises(ValueError, match=r"`shard_optimizer_state` with tf_keras"):
        opt_strategy(cpu_replicas=2, shard_optimizer_state=True)
