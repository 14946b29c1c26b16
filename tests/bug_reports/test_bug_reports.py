"""Users' bug reports against Keras 3 with tf.distribute, run under `opt_strategy()`.

Each test runs the reporter's code, with synthetic data of the same shapes
and only the strategy line changed, on 2 replicas in this process (the
session's virtual CPUs, tests/conftest.py), and asserts what the reporter
expected. The reports that failed under the plain multi-worker strategy run
under `KerasMultiWorkerMirroredStrategy` with 2 local CPU replicas (the
class `opt_strategy()` builds on each worker, taking the same reduce and
gather paths with one worker), each in a pytest process of its own. docs/guides/bug-reports.md lists them: the
report, what went wrong upstream, what happens here.

Tolerances: float32 against one device without a strategy, rtol 1e-5 (the
all-reduce adds the replicas' gradients in another order).
"""

import functools
import os
import pathlib
import re
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfdist_opt
from tfdist_opt.strategy import keras_compat

RTOL = 1e-5


pytestmark = pytest.mark.usefixtures("no_tf_config")


def _two_replicas():
    strategy = tfdist_opt.opt_strategy(cpu_replicas=2)
    assert strategy.num_replicas_in_sync == 2
    return strategy


_CHILD = "TFDIST_TEST_BUG_REPORT_CHILD"
ROOT = pathlib.Path(__file__).resolve().parents[2]


def _own_process(test):
    """Runs `test` in a pytest process of its own.

    A multi-worker strategy configures TensorFlow's collective ops for the
    whole process, and two in one process share collective instance keys:
    the tests that build one run alone, in a child pytest (10 minutes at
    most), so the rest of the suite's process never sees it. The child runs
    with `--runxfail`: an expected failure fails there, and the parent's
    mark judges it.
    """

    @functools.wraps(test)
    def run(*args, **kwargs):
        if os.environ.get(_CHILD) == "1":
            return test(*args, **kwargs)
        node = f"{pathlib.Path(__file__).relative_to(ROOT)}::{test.__name__}"
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-n",
                "0",
                "-q",
                "--runxfail",
                "-p",
                "no:cacheprovider",
                node,
            ],
            env={**os.environ, _CHILD: "1"},
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]

    return run


@pytest.fixture
def multi_worker():
    """The multi-worker strategy, built only in the child process (`_own_process`)."""
    if os.environ.get(_CHILD) != "1":
        return None
    strategy = keras_compat.KerasMultiWorkerMirroredStrategy(local_cpu_replicas=2)
    assert strategy.num_replicas_in_sync == 2
    return strategy


def test_keras_19891_evaluate_and_fit_do_not_depend_on_replicas():
    """https://github.com/keras-team/keras/issues/19891 (2024-06).

    Reporter: with 4 replicas `evaluate` disagreed with the loss computed
    from `predict`, and one `fit` step trained differently than with one.
    """
    batch_size = 12
    x = np.random.RandomState(0).uniform(-1, 1, (batch_size, 1)).astype("float32")
    y = np.random.RandomState(1).uniform(-1, 1, (batch_size, 10)).astype("float32")

    def run(strategy):
        with strategy.scope():
            inp = keras.Input(shape=(1,))
            layer = keras.layers.Dense(10, kernel_initializer=keras.initializers.GlorotUniform(3))
            model = keras.Model(inp, layer(inp))
            model.compile(loss="mse", optimizer="sgd")
            gt = np.mean((model.predict(x, batch_size=batch_size, verbose=0) - y) ** 2)
            evaluated = model.evaluate(x, y, batch_size=batch_size, verbose=0)
            model.fit(x, y, batch_size=batch_size, epochs=1, verbose=0)
        return gt, evaluated, [np.asarray(w) for w in model.weights]

    gt, evaluated, weights = run(_two_replicas())
    np.testing.assert_allclose(evaluated, gt, rtol=RTOL)
    _, _, one_device = run(tfdist_opt.opt_strategy())
    for got, want in zip(weights, one_device):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=1e-7)


def test_keras_21054_stateful_metric_counts_every_input():
    """https://github.com/keras-team/keras/issues/21054 (2025-03).

    Reporter: a metric that counts its inputs (an int32 weight,
    `assign_add(tf.shape(y_pred)[0])`) reported the wrong count under 4
    replicas; tf-keras gave 120 for 120 inputs.
    """

    class CountInputs(keras.metrics.Metric):
        def __init__(self):
            super().__init__()
            self.var = self.add_weight(name="var", initializer="zeros", dtype="int32")

        def update_state(self, y_true, y_pred, sample_weight=None):
            self.var.assign_add(tf.shape(y_pred)[0])

        def reset_state(self):
            self.var.assign(0)

        def result(self):
            return tf.cast(self.var, "float32")

    batch_size = 12
    x = np.zeros((batch_size * 10, 1), "float32")
    y = np.zeros((batch_size * 10, 1), "float32")
    with _two_replicas().scope():
        inp = keras.Input(shape=(1,))
        model = keras.Model(inp, keras.layers.Dense(10)(inp))
        model.compile(loss="mse", optimizer="sgd", metrics=[CountInputs()])
        logs = model.evaluate(x, y, batch_size=batch_size, verbose=0, return_dict=True)
    counts = [v for k, v in logs.items() if k != "loss"]
    assert counts == [120.0]


def test_keras_21366_mixed_float16_jit_compile_trains():
    """https://github.com/keras-team/keras/issues/21366 (2025-06).

    Reporter: `mixed_float16` + MirroredStrategy + `compile(jit_compile=True)`
    crashed in `LossScaleOptimizer` ("merge_call called while defining a
    new graph or a tf.function"), even with a trivial model.
    """
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        with _two_replicas().scope():
            model = keras.Sequential(
                [
                    keras.layers.Input(shape=(32,)),
                    keras.layers.Dense(64, activation="relu"),
                    keras.layers.Dense(64, activation="relu"),
                    keras.layers.Dense(10),
                ]
            )
            model.compile(
                optimizer=keras.optimizers.Adam(),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                jit_compile=True,
            )
        x = np.random.RandomState(0).randn(64, 32).astype("float32")
        y = np.random.RandomState(1).randint(0, 10, (64,))
        history = model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    finally:
        keras.mixed_precision.set_global_policy(previous)
    assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
    assert np.isfinite(history.history["loss"][0])


def test_keras_20611_dropout_model_builds_and_trains():
    """https://github.com/keras-team/keras/issues/20611 (2024-12), also
    https://github.com/tensorflow/tensorflow/issues/82281 (2024-12).

    Reporter: a Sequential with `Dropout` could not even be created under
    MirroredStrategy with Keras 3.7 (3.5 was fine).
    """
    with _two_replicas().scope():
        model = keras.Sequential(
            [
                keras.layers.Dense(128, activation="gelu"),
                keras.layers.Dropout(0.2),
                keras.layers.Dense(128),
            ]
        )
        model.compile("adam", "mse")
    x = np.random.RandomState(0).randn(32, 16).astype("float32")
    history = model.fit(x, np.zeros((32, 128), "float32"), batch_size=8, verbose=0)
    assert np.isfinite(history.history["loss"][0])


def test_tensorflow_62831_load_weights_under_mirrored_scope(tmp_path):
    """https://github.com/tensorflow/tensorflow/issues/62831 (2024-01).

    Reporter: `model.load_weights('./model.weights.h5')` in a
    MirroredStrategy scope raised "unsupported operand type(s) for /:
    'Dataset' and 'int'" (fine with OneDeviceStrategy).
    """
    path = str(tmp_path / "model.weights.h5")
    dataset = tf.data.Dataset.from_tensors(([1.0], [1.0])).repeat(100).batch(10)
    with _two_replicas().scope():
        model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
        model.compile(loss="mse", optimizer="sgd")
    model.fit(dataset, epochs=1, verbose=0)
    model.save_weights(path)
    trained = [np.asarray(w) for w in model.weights]
    with _two_replicas().scope():
        restored = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
        restored.compile(loss="mse", optimizer="sgd")
        restored.load_weights(path)
    for got, want in zip(restored.weights, trained):
        np.testing.assert_array_equal(np.asarray(got), want)


@_own_process
def test_tensorflow_72388_keras3_multi_worker_quickstart(multi_worker):
    """https://github.com/tensorflow/tensorflow/issues/72388 (2024-07).

    Reporter: TF's multi-worker quickstart under Keras 3 failed in `fit`
    with "Invalid reduction dimension 0 for input with 0 dimensions"
    (a collective sum of a scalar log); tf-keras worked.
    """
    x = np.random.RandomState(0).rand(64, 28, 28).astype("float32")
    y = np.random.RandomState(1).randint(0, 10, (64,)).astype("int64")
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(16)
    with multi_worker.scope():
        model = keras.Sequential(
            [
                keras.Input(shape=(28, 28)),
                keras.layers.Reshape(target_shape=(28, 28, 1)),
                keras.layers.Conv2D(4, 3, activation="relu"),
                keras.layers.Flatten(),
                keras.layers.Dense(16, activation="relu"),
                keras.layers.Dense(10),
            ]
        )
        model.compile(
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            optimizer=keras.optimizers.SGD(learning_rate=0.001),
            metrics=["accuracy"],
        )
    history = model.fit(dataset, epochs=2, steps_per_epoch=3, verbose=0)
    assert len(history.history["loss"]) == 2
    assert all(np.isfinite(history.history["accuracy"]))


@_own_process
def test_keras_20585_multi_worker_tutorial_fit_and_evaluate(multi_worker):
    """https://github.com/keras-team/keras/issues/20585 (2024-12).

    Reporter: "Does Keras 3 work with MultiWorkerMirroredStrategy?" — the
    TF tutorial `multi_worker_with_keras` failed in `fit` since TF 2.16.
    Expected: it trains; `evaluate` gives the same loss as one device would
    for the trained weights.
    """
    x = np.random.RandomState(2).rand(32, 28, 28).astype("float32")
    y = np.random.RandomState(3).randint(0, 10, (32,)).astype("int64")

    def build():
        model = keras.Sequential(
            [
                keras.Input(shape=(28, 28)),
                keras.layers.Reshape(target_shape=(28, 28, 1)),
                keras.layers.Conv2D(4, 3, activation="relu"),
                keras.layers.Flatten(),
                keras.layers.Dense(10),
            ]
        )
        model.compile(
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            optimizer=keras.optimizers.SGD(learning_rate=0.01),
            metrics=["accuracy"],
        )
        return model

    with multi_worker.scope():
        model = build()
        model.fit(x, y, batch_size=16, epochs=1, verbose=0)
        loss = model.evaluate(x, y, batch_size=16, verbose=0)[0]
    one_device = build()  # no strategy
    one_device.set_weights(model.get_weights())
    want = one_device.evaluate(x, y, batch_size=16, verbose=0)[0]
    np.testing.assert_allclose(loss, want, rtol=RTOL)


def test_keras_21069_embedding_sequence_model_fits():
    """https://github.com/keras-team/keras/issues/21069 (2025-03).

    Reporter: a keras.io example trained on one device but its `fit` failed
    on 2 devices under MirroredStrategy ("Cannot convert a partially known
    TensorShape (1, None) to a Tensor", from the sparse-gradient path of an
    embedding lookup). Reduced: an `Embedding` on variable-length integer
    sequences, trained on 2 replicas, equal to one device.
    """
    x = np.random.RandomState(0).randint(0, 50, (32, 7))
    y = np.random.RandomState(1).randint(0, 2, (32,))

    def run(strategy):
        with strategy.scope():
            inp = keras.Input(shape=(None,), dtype="int32")
            h = keras.layers.Embedding(
                50, 8, embeddings_initializer=keras.initializers.Constant(0.1)
            )(inp)
            h = keras.layers.GlobalAveragePooling1D()(h)
            out = keras.layers.Dense(1, kernel_initializer="ones")(h)
            model = keras.Model(inp, out)
            model.compile(
                keras.optimizers.SGD(0.1), keras.losses.BinaryCrossentropy(from_logits=True)
            )
            model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
        return [np.asarray(w) for w in model.weights]

    for got, want in zip(run(_two_replicas()), run(tfdist_opt.opt_strategy())):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=1e-7)


@_own_process
def test_ray_47464_batch_of_one_refused_and_its_advice_trains_every_example(multi_worker):
    """https://github.com/ray-project/ray/issues/47464 (2024-09).

    Reporter: Ray Train's TensorflowTrainer example (each worker's shard
    batched with `to_tf(batch_size=1)`, `fit` under MultiWorkerMirrored)
    failed: "Attempt to convert a value (PerReplica:{0: <tf.Tensor:
    shape=(1,), dtype=int64 ...}) with an unsupported type". Here: the
    example's model on an auto-sharded global batch of 1 over 2 replicas is
    refused before step 1, naming the batch and suggesting one; following
    that advice trains on every example, equal to one device fed the same
    batches (on 2 workers the same message's advice, followed for
    per-worker data, trained on half of the examples, silently). Ray's own
    shape, a per-worker shard with auto-sharding OFF, trains on 2 workers
    (tests/multiworker/test_dropin_inputs.py, test_per_worker_inputs.py).
    """
    x = np.random.RandomState(0).rand(8, 1).astype("float32")
    y = (2 * x + 1).astype("float32")

    def run(strategy, batch):
        dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch)
        with strategy.scope():
            model = keras.Sequential(
                [
                    keras.Input(shape=(1,)),
                    keras.layers.Dense(10, kernel_initializer=keras.initializers.GlorotUniform(1)),
                    keras.layers.Dense(1, kernel_initializer=keras.initializers.GlorotUniform(2)),
                ]
            )
            model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", metrics=["mse"])
        history = model.fit(dataset, epochs=2, verbose=0).history
        return history["loss"], [np.asarray(w) for w in model.weights]

    with pytest.raises(ValueError, match="global_batch_size=1") as refused:
        run(multi_worker, 1)
    advice = int(re.search(r"Use e\.g\. (\d+)\.", str(refused.value)).group(1))
    assert advice == 2
    loss, weights = run(multi_worker, advice)
    want_loss, want_weights = run(tfdist_opt.opt_strategy(), advice)
    np.testing.assert_allclose(loss, want_loss, rtol=RTOL)
    for got, want in zip(weights, want_weights):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=1e-7)
