"""opt_strategy() in-process: what it builds, and Keras 3 training under it.

The session has 4 virtual CPU devices (tests/conftest.py). Equality
tolerance for 2 replicas vs 1: rel 1e-5 (float32; the only difference is the
summation order of the gradient all-reduce).
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfdist_opt
from tfdist_opt import _logging

RTOL = 1e-5


@pytest.fixture(autouse=True)
def _no_tf_config(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    for name in list(__import__("os").environ):
        if name.startswith("TFDIST_OPT_"):
            monkeypatch.delenv(name)


@pytest.mark.gpu
def test_auto_is_one_device_on_cpu_and_mirrors_2_gpus():
    from tests.conftest import host_gpus

    gpus = host_gpus()
    s = tfdist_opt.opt_strategy()
    if len(gpus) >= 2:  # README: 2+ GPUs -> MirroredStrategy over them, NCCL
        assert isinstance(s, tf.distribute.MirroredStrategy)
        assert s.num_replicas_in_sync == len(gpus)
        assert isinstance(s.extended._cross_device_ops, tf.distribute.NcclAllReduce)
    else:  # CPU, or 1 GPU: OneDeviceStrategy
        assert isinstance(s, tf.distribute.OneDeviceStrategy)
        assert s.num_replicas_in_sync == 1
        assert s.extended.worker_devices[0].endswith("device:GPU:0" if gpus else "device:CPU:0")


def test_cpu_replicas_give_mirrored():
    s = tfdist_opt.opt_strategy(cpu_replicas=2)
    assert isinstance(s, tf.distribute.MirroredStrategy)
    assert s.num_replicas_in_sync == 2
    assert isinstance(s.extended._cross_device_ops, tf.distribute.ReductionToOneDevice)


def test_hierarchical_copy_and_packs():
    s = tfdist_opt.opt_strategy(cpu_replicas=2, all_reduce="hierarchical_copy", num_packs=2)
    ops = s.extended._cross_device_ops
    assert isinstance(ops, tf.distribute.HierarchicalCopyAllReduce)
    assert ops._num_packs == 2


def test_env_and_preset_reach_the_strategy(monkeypatch):
    monkeypatch.setenv("TFDIST_OPT_CPU_REPLICAS", "2")
    assert tfdist_opt.opt_strategy().num_replicas_in_sync == 2
    assert tfdist_opt.opt_strategy("cpu_test", cpu_replicas=3).num_replicas_in_sync == 3


@pytest.mark.gpu
def test_nccl_on_cpu_is_a_clear_error(fake_gpus):
    fake_gpus(0)  # the no-GPU branch on any host (the GPU one: test_plan.py)
    with pytest.raises(ValueError, match="NCCL needs GPUs and this host has none"):
        tfdist_opt.opt_strategy(cpu_replicas=2, all_reduce="nccl")


def test_inapplicable_setting_warns():
    with pytest.warns(UserWarning, match="bytes_per_pack=4096 has no effect with mirrored"):
        tfdist_opt.opt_strategy(cpu_replicas=2, bytes_per_pack=4096)


def test_logs_once_what_and_why(monkeypatch):
    seen = []
    monkeypatch.setattr(_logging.logging, "info", seen.append)
    monkeypatch.setattr(_logging, "_LOGGED", set())
    tfdist_opt.opt_strategy(cpu_replicas=2)
    tfdist_opt.opt_strategy(cpu_replicas=2)
    assert len(seen) == 1
    assert "MirroredStrategy with 2 replica(s)" in seen[0]
    assert "no GPU, so reduce_to_one (NCCL needs GPUs)" in seen[0]


def test_too_many_cpu_replicas_after_init_is_a_clear_error():
    tf.constant(1.0)  # runtime initialised with 4 virtual CPUs
    with pytest.raises(
        RuntimeError, match="cpu_replicas=8 needs virtual CPU devices.*already initialised with 4"
    ):
        tfdist_opt.opt_strategy(cpu_replicas=8)


def test_mixed_precision_sets_policy():
    try:
        tfdist_opt.opt_strategy(mixed_precision="mixed_bfloat16")
        assert keras.mixed_precision.global_policy().name == "mixed_bfloat16"
    finally:
        keras.mixed_precision.set_global_policy("float32")


# ------------------------------------------------------------ Keras 3 fit
def _data(as_dict):
    rng = np.random.RandomState(0)
    x = rng.rand(64, 6).astype("float32")
    y = rng.randint(0, 3, size=(64,)).astype("int32")
    ds = tf.data.Dataset.from_tensor_slices(({"features": x} if as_dict else x, y))
    return x, ds.batch(16)


def _train(strategy, as_dict=False, tmp_path=None):
    x, ds = _data(as_dict)
    with strategy.scope():
        inputs = keras.Input((6,), name="features")
        h = keras.layers.Dense(
            8, activation="relu", kernel_initializer=keras.initializers.GlorotUniform(seed=1)
        )(inputs)
        out = keras.layers.Dense(3, kernel_initializer=keras.initializers.GlorotUniform(seed=2))(h)
        model = keras.Model({"features": inputs} if as_dict else inputs, out)
        model.compile(
            keras.optimizers.SGD(0.1, momentum=0.9),
            keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
    hist = model.fit(ds, epochs=3, verbose=0)
    ev = model.evaluate(ds, verbose=0, return_dict=True)
    pred = model.predict({"features": x} if as_dict else x, batch_size=16, verbose=0)
    saved = None
    if tmp_path is not None:
        path = str(tmp_path / "m.keras")
        model.save(path)
        saved = keras.models.load_model(path).predict(
            {"features": x} if as_dict else x, batch_size=16, verbose=0
        )
    return model.get_weights(), hist.history, ev, pred, saved


@pytest.mark.parametrize("as_dict", [False, True])
def test_two_virtual_replicas_match_one(as_dict, tmp_path):
    ref = _train(tfdist_opt.opt_strategy(), as_dict)
    two = tfdist_opt.opt_strategy(cpu_replicas=2)
    assert two.num_replicas_in_sync == 2
    got = _train(two, as_dict, tmp_path)
    assert ref[1]["loss"][-1] < ref[1]["loss"][0]
    for a, b in zip(ref[0], got[0]):
        np.testing.assert_allclose(b, a, rtol=RTOL, atol=1e-7)
    np.testing.assert_allclose(got[1]["loss"], ref[1]["loss"], rtol=RTOL)
    np.testing.assert_allclose(got[2]["loss"], ref[2]["loss"], rtol=RTOL)
    np.testing.assert_allclose(got[3], ref[3], rtol=RTOL, atol=1e-6)
    np.testing.assert_allclose(got[4], ref[3], rtol=RTOL, atol=1e-6)


def test_steps_per_epoch_with_repeat():
    s = tfdist_opt.opt_strategy(cpu_replicas=2)
    _, ds = _data(False)
    with s.scope():
        model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(3)])
        model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    hist = model.fit(ds.repeat(), epochs=2, steps_per_epoch=3, verbose=0)
    assert len(hist.history["loss"]) == 2
    assert int(model.optimizer.iterations.numpy()) == 6


@pytest.mark.parametrize(
    "kw,name",
    [
        ({"grad_accum": 2}, "grad_accum"),
        ({"compression": "bf16"}, "compression"),
        ({"bytes_per_pack": "auto"}, "bytes_per_pack"),
    ],
)
def test_keras3_only_features_refused_under_tf_keras(monkeypatch, kw, name):
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", "1")
    with pytest.raises(
        ValueError,
        match=rf"Invalid value for `{name}` with tf_keras \(TF_USE_LEGACY_KERAS=1\).*Received: {name}=",
    ):
        tfdist_opt.opt_strategy(cpu_replicas=2, **kw)


@pytest.mark.parametrize(
    "kind,legacy,hooked",
    [
        ("multi_worker", False, True),
        ("multi_worker", True, False),
        ("mirrored", False, False),
        ("one_device", False, False),
    ],
)
def test_multi_worker_defaults_run_through_the_hooks(kind, legacy, hooked):
    """Keras 3 on multi-worker: hooked at TF's defaults (fused update, one
    collective with the logs); other kinds and tf_keras keep upstream's path."""
    from tfdist_opt.gradients import gradient_plan
    from tfdist_opt.gradients.options import GradientOptions

    options = GradientOptions.from_config(tfdist_opt.StrategyConfig())
    plan = gradient_plan.plan_gradients(options, kind, "ring", legacy, "auto")
    options = plan.options
    assert plan.hooked is hooked
    assert options.hooked is hooked
    assert options.is_default is not hooked
    assert options.bytes_per_pack == 0  # TF's one pack either way
