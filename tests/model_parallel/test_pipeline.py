"""Pipeline model on the session's 4 virtual CPUs: placement, math, saving.

Placement is read from the traced train step (each op's requested device)
and from the variables; the math is compared with the same layers on one
device after one SGD step (weight change = -lr * gradient).
"""

import numpy as np
import pytest

import keras
import tensorflow as tf

from tfdist_opt import model_parallel

DEVICES = [
    "/job:localhost/replica:0/task:0/device:CPU:1",
    "/job:localhost/replica:0/task:0/device:CPU:2",
]
IN = 6


def _layers():
    return [
        [keras.layers.Dense(16, activation="tanh"), keras.layers.Dense(12, activation="tanh")],
        [keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(1)],
    ]


def _data(n=32):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, IN)).astype("float32")
    return x, (x[:, :1] * x[:, 1:2]).astype("float32")


def _pipeline(micro_batches=1, optimizer=None):
    keras.utils.set_random_seed(3)
    model = model_parallel.pipeline(
        _layers(), devices=["/cpu:1", "/cpu:2"], micro_batches=micro_batches, input_shape=(IN,)
    )
    model.compile(optimizer or keras.optimizers.SGD(1.0), "mse")
    return model


def _device_index(name):
    return tf.DeviceSpec.from_string(name).device_index


def test_variables_and_slots_sit_on_their_stage_devices():
    model = _pipeline(optimizer=keras.optimizers.Adam(0.01))
    stage_of = {}
    for s, stage in enumerate(model.stages):
        assert stage.weights
        for w in stage.weights:
            assert _device_index(w.value.device) == s + 1, (w.path, w.value.device)
            stage_of[w.path] = s
    x, y = _data()
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)  # slots must stay put
    slots = [v for v in model.optimizer.variables if v.path.endswith(("_momentum", "_velocity"))]
    assert len(slots) == 2 * len(model.trainable_variables)
    for w in model.trainable_variables:
        # "adam/<var>_momentum" ("adam_3/..." when other Adams exist).
        prefix = w.path.replace("/", "_") + "_"
        mine = [v for v in slots if v.path.split("/", 1)[-1].startswith(prefix)]
        assert len(mine) == 2, w.path
        for v in mine:
            assert v.value.device == w.value.device, (v.path, v.value.device)


@pytest.mark.parametrize("micro_batches", [1, 4])
def test_forward_and_backward_ops_run_on_the_stage_devices(micro_batches):
    model = _pipeline(micro_batches)
    x, y = _data(16)
    step = tf.function(model.train_step)
    graph = step.get_concrete_function((tf.constant(x), tf.constant(y))).graph
    matmuls = [op for op in graph.get_operations() if op.type == "MatMul"]
    # No MatMul left to the default device: every one names a stage's CPU.
    assert all(
        op.device and tf.DeviceSpec.from_string(op.device).device_type == "CPU" for op in matmuls
    ), [(o.name, o.device) for o in matmuls]
    on = {
        d: [op.name for op in matmuls if _device_index(op.device) == _device_index(d)]
        for d in DEVICES
    }
    assert sum(map(len, on.values())) == len(matmuls)
    # Per micro-batch and stage: 2 forward MatMuls and 2 x 2 backward ones
    # (weight and input gradient of each Dense), all on the stage's device.
    for d in DEVICES:
        assert len(on[d]) == micro_batches * 6, on[d]
        backward = [n for n in on[d] if n.startswith("gradient_tape/")]
        assert len(backward) == micro_batches * 4, on[d]


def _one_device_step(x, y, batch):
    keras.utils.set_random_seed(3)
    layers = [la for group in _layers() for la in group]
    ref = keras.Sequential([keras.Input((IN,)), *layers])
    ref.compile(keras.optimizers.SGD(1.0), "mse")
    before = ref.get_weights()
    ref.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0)
    return before, ref.get_weights()


@pytest.mark.parametrize("micro_batches", [1, 4])
def test_gradients_equal_the_one_device_model(micro_batches):
    x, y = _data(16)
    ref_before, ref_after = _one_device_step(x, y, 16)
    model = _pipeline(micro_batches)
    model.set_weights(ref_before)
    model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
    assert int(model.optimizer.iterations.numpy()) == 1
    moved = False
    for b, r, p in zip(ref_before, ref_after, model.get_weights()):
        ref_grad, grad = b - r, b - p  # SGD(1.0): one step moves by -gradient
        np.testing.assert_allclose(grad, ref_grad, atol=1e-5, rtol=0)
        moved |= bool(np.abs(ref_grad).max() > 1e-3)
    assert moved


def test_evaluate_predict_and_save_round_trip(tmp_path):
    model = _pipeline(micro_batches=2, optimizer=keras.optimizers.Adam(0.01))
    x, y = _data()
    history = model.fit(x, y, batch_size=8, epochs=2, verbose=0)
    assert history.history["loss"][1] < history.history["loss"][0]
    loss = model.evaluate(x, y, verbose=0)
    pred = model.predict(x, verbose=0)
    path = tmp_path / "pipe.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    assert isinstance(loaded, model_parallel.PipelineModel)
    assert loaded.micro_batches == 2 and loaded.stage_devices == ["/cpu:1", "/cpu:2"]
    for s, stage in enumerate(loaded.stages):
        assert {_device_index(w.value.device) for w in stage.weights} == {s + 1}
    np.testing.assert_allclose(loaded.predict(x, verbose=0), pred, atol=1e-6)
    assert loaded.evaluate(x, y, verbose=0) == pytest.approx(loss, rel=1e-5)
    assert int(loaded.optimizer.iterations.numpy()) == 8
    for a, b in zip(loaded.optimizer.variables, model.optimizer.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
        assert _device_index(a.value.device) == _device_index(b.value.device)
    loaded.fit(x, y, batch_size=8, epochs=1, verbose=0)  # keeps training


def test_sequential_split_balances_bytes_and_keeps_weights():
    keras.utils.set_random_seed(0)
    seq = keras.Sequential(
        [
            keras.Input((IN,)),
            keras.layers.Dense(64),
            keras.layers.Activation("relu"),
            keras.layers.Dense(64),
            keras.layers.Dense(64),
            keras.layers.Dense(1),
        ]
    )
    model = model_parallel.pipeline(seq, devices="auto", num_stages=3)
    assert model.stage_devices == [d.name for d in tf.config.list_logical_devices("CPU")[:3]]
    names = [la.name for la in seq.layers]  # Dense, ReLU, Dense, Dense, Dense
    # Bytes 448, 0, 4160, 4160, 65 (x4): the best cut's largest stage is 4225.
    assert [[la.name for la in st.layers] for st in model.stages] == [
        names[0:2],
        names[2:3],
        names[3:5],
    ]
    x, _ = _data()
    np.testing.assert_allclose(model.predict(x, verbose=0), seq.predict(x, verbose=0), atol=1e-5)
    for s, stage in enumerate(model.stages):
        assert {_device_index(w.value.device) for w in stage.weights} == {s}
    named = model_parallel.pipeline(seq, devices=["/cpu:3", "/cpu:2"], split_at=[names[3]])
    assert [len(st.layers) for st in named.stages] == [3, 2]
    assert [_device_index(st.weights[0].value.device) for st in named.stages] == [3, 2]


def test_refusals():
    with pytest.raises(ValueError, match=r"jit_compile.*Received: jit_compile=True"):
        _pipeline().compile("sgd", "mse", jit_compile=True)
    model = _pipeline()
    model.jit_compile = True
    x, y = _data()
    with pytest.raises(ValueError, match=r"cannot be XLA-compiled"):
        model.fit(x, y, verbose=0)
    five = [keras.layers.Dense(2) for _ in range(5)]
    with pytest.raises(ValueError, match=r"More stages than devices: 5 stages but only 4"):
        model_parallel.pipeline(five, input_shape=(IN,))
    with pytest.raises(ValueError, match=r"Stage 1 \('.*'\) has no variables"):
        model_parallel.pipeline([keras.layers.Dense(2), keras.layers.ReLU()], input_shape=(IN,))
    inner = keras.Sequential(
        [keras.layers.Dense(3, name="inner_a"), keras.layers.Dense(3, name="inner_b")], name="block"
    )
    seq = keras.Sequential([keras.Input((IN,)), keras.layers.Dense(4), inner])
    with pytest.raises(
        ValueError,
        match=r"at layer 'inner_b': it is inside the nested "
        r"layer 'block'",
    ):
        model_parallel.pipeline(seq, split_at=["inner_b"])
    with pytest.raises(ValueError, match=r"micro_batches"):
        model_parallel.pipeline([keras.layers.Dense(2)], micro_batches=0, input_shape=(IN,))
    with pytest.raises(ValueError, match=r"Missing `input_shape`"):
        model_parallel.pipeline([keras.layers.Dense(2)])
