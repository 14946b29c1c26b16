"""Keras trainer-test cases that failed under our strategies (issue 62).

From Keras 3.15.1's `keras/src/trainers/trainer_test.py` run with every
test inside `opt_strategy(cpu_replicas=2).scope()` (`benchmarks/keras_tests.py
--files=keras/src/trainers/trainer_test.py`), on 2 virtual replicas
(tests/conftest.py), against one device:

- `predict_on_batch` returned one copy of the outputs per replica (3
  examples: 6 rows), as plain `MirroredStrategy` does: Keras hands the batch
  undistributed to every replica and concatenates;
- a subclassed model first built inside `fit`/`evaluate` from sparse or
  ragged input failed before step 1 (`'SparseTensor' object has no
  attribute 'device'`): Keras reduces the first distributed batch to build
  the model, and TF's cross-device reduce cannot take composite tensors;
- a `jit_compile=True` model without an `Input`, first built by `predict`
  or `predict_on_batch`, failed ("We failed to lift variable creations out
  of this tf.function, so this tf.function cannot be run on XLA"): its
  variables are created inside the per-replica XLA function, and the
  copies on replica 1 were initialized from a read of replica 0's variable
  (`tfdist_opt.keras.replica_initial_values`).

Tolerance: rel 1e-5, abs 1e-6 (float32; the replicas' halves add in
another order).
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfdist_opt

pytestmark = pytest.mark.usefixtures("no_tf_config")

RNG = np.random.RandomState(0)


class TwoInputs(keras.Model):
    def __init__(self):
        super().__init__()
        self.a = keras.layers.Dense(2, kernel_initializer="ones")
        self.b = keras.layers.Dense(2, kernel_initializer="ones")

    def call(self, x):
        return self.a(x[0]) + self.b(x[1])


def test_predict_on_batch_returns_one_row_per_example():
    x = [RNG.rand(3, 2).astype("float32"), RNG.rand(3, 3).astype("float32")]
    y = np.ones((3, 2), "float32")
    strategy = tfdist_opt.opt_strategy(cpu_replicas=2)
    assert strategy.num_replicas_in_sync == 2
    with strategy.scope():  # as Keras's test: every call inside the scope
        model = TwoInputs()
        model.compile(optimizer="sgd", loss="mse")
        model.fit(x, y, verbose=0)
        got = model.predict_on_batch(x)
    later = model.predict_on_batch(x)  # outside the scope too
    reference = TwoInputs()  # one device, the trained weights
    reference(x)
    reference.set_weights(model.get_weights())
    want = reference.predict_on_batch(x)
    assert got.shape == later.shape == (3, 2)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(later, want, rtol=1e-5, atol=1e-6)


class SparseDense(keras.Model):
    """Built inside `fit` (no Input): the first batch builds it."""

    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(1, kernel_initializer="ones")

    def call(self, x):
        return self.dense(x)


class Doubles(keras.Model):
    """Keras's trainer test's ragged model: no variables, built inside `fit`."""

    def call(self, x):
        return x * 2


def test_model_first_built_inside_fit_from_sparse_input():
    dense = (RNG.rand(8, 4) * (RNG.rand(8, 4) > 0.5)).astype("float32")
    y = RNG.rand(8, 1).astype("float32")

    def data():
        return tf.data.Dataset.from_tensor_slices((tf.sparse.from_dense(dense), y)).batch(4)

    def run(strategy):
        with strategy.scope():  # as Keras's test: every call inside the scope
            model = SparseDense()
            model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
            history = model.fit(data(), epochs=2, verbose=0).history["loss"]
            return history, model.evaluate(data(), verbose=0), model.get_weights()

    want = run(tf.distribute.get_strategy())
    got = run(tfdist_opt.opt_strategy(cpu_replicas=2))
    np.testing.assert_allclose(got[0], want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)
    for g, w in zip(got[2], want[2]):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_model_first_built_inside_fit_from_ragged_input():
    x = tf.ragged.constant([[1.0], [2.0, 3.0], [4.0], [5.0, 6.0, 7.0]])
    with tfdist_opt.opt_strategy(cpu_replicas=2).scope():
        model = Doubles()
        model.compile(optimizer="adam", loss=lambda y, y_pred, sample_weight=None: 0.0)
        model.fit(x, x, verbose=0)
        got = model.predict(x, verbose=0)
    assert isinstance(got, tf.RaggedTensor)
    assert got.to_list() == (x * 2).to_list()


def _xla_model():
    """A model without an `Input`: its first call creates its variables."""
    model = keras.Sequential(
        [
            keras.layers.Dense(8, activation="relu"),  # glorot: random initial values
            keras.layers.Dense(3),
        ]
    )
    model.compile(
        optimizer="sgd",
        loss="mse",
        metrics=["mae"],
        jit_compile=True,  # as Keras's test
    )
    return model


def _one_device(model, x):
    reference = keras.Sequential([keras.layers.Dense(8, activation="relu"), keras.layers.Dense(3)])
    reference.compile(optimizer="sgd", loss="mse", metrics=["mae"], jit_compile=True)
    reference(x[:1])
    reference.set_weights(model.get_weights())
    return reference


def test_jit_model_first_built_by_predict_equals_one_device():
    x = RNG.rand(10, 4).astype("float32")
    y = RNG.rand(10, 3).astype("float32")
    strategy = tfdist_opt.opt_strategy(cpu_replicas=2)
    assert strategy.num_replicas_in_sync == 2
    with strategy.scope():  # as Keras's test: every call inside the scope
        model = _xla_model()
        got = model.predict(x, batch_size=4, verbose=0)  # builds it, under XLA
        logs = model.test_on_batch(x, y, return_dict=True)
        on_batch = model.predict_on_batch(x)
    # Each variable's copies start equal (replica 1's from replica 0's
    # initial value), as one variable on one device.
    for variable in model.variables:
        first, *others = strategy.experimental_local_results(variable.value)
        for other in others:
            np.testing.assert_array_equal(other.numpy(), first.numpy())
    reference = _one_device(model, x)
    np.testing.assert_allclose(
        got, reference.predict(x, batch_size=4, verbose=0), rtol=1e-5, atol=1e-6
    )
    want = reference.test_on_batch(x, y, return_dict=True)
    assert logs.keys() == want.keys()
    for key in want:
        np.testing.assert_allclose(logs[key], want[key], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(on_batch, reference.predict_on_batch(x), rtol=1e-5, atol=1e-6)


def test_jit_model_first_built_by_predict_on_batch_runs():
    # Keras's `test_on_batch_methods_without_training_jit`: predict_on_batch
    # is the model's first call.
    x = RNG.rand(10, 4).astype("float32")
    y = RNG.rand(10, 3).astype("float32")
    with tfdist_opt.opt_strategy(cpu_replicas=2).scope():
        model = _xla_model()
        got = model.predict_on_batch(x)
        logs = model.test_on_batch(x, y, return_dict=True)
    reference = _one_device(model, x)
    # The rows of the first replica: see the xfail below for the others.
    np.testing.assert_allclose(got[: len(x)], reference.predict_on_batch(x), rtol=1e-5, atol=1e-6)
    want = reference.test_on_batch(x, y, return_dict=True)
    for key in want:
        np.testing.assert_allclose(logs[key], want[key], rtol=1e-5, atol=1e-6)


@pytest.mark.xfail(
    strict=True,
    reason="a model created in the scope but never built or called there is "
    "not known to the strategy (model_registry notes models when Keras opens "
    "their name scope on this thread; predict builds it in the replicas' "
    "threads), so it runs Keras's own predict_on_batch: one copy per replica",
)
def test_predict_on_batch_of_a_model_never_built_returns_one_row_per_example():
    x = RNG.rand(10, 4).astype("float32")
    with tfdist_opt.opt_strategy(cpu_replicas=2).scope():
        model = _xla_model()
        assert model.predict_on_batch(x).shape == (10, 3)
