"""Bug reports about the multi-worker strategy, each test in a pytest process of its own.

Each test: a user's report, the code as filed (docs/guides/bug-reports.md).
"""

import re

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfdist_opt

from tests.bug_reports.support import RTOL, own_process

pytestmark = pytest.mark.usefixtures("no_tf_config")


@own_process
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


@own_process
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
    reference = build()  # no strategy
    reference.set_weights(model.get_weights())
    want = reference.evaluate(x, y, batch_size=16, verbose=0)[0]
    np.testing.assert_allclose(loss, want, rtol=RTOL)


@own_process
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
