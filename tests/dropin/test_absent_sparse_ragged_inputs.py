"""`None`, sparse and ragged inputs on 2 replicas, as on one device (issue 62).

Each case is what plain Keras trains on one device without a strategy;
on 2 virtual replicas (tests/conftest.py) under `opt_strategy()` it trains
to the same weights and losses, fed the same global batches:

- `tf.SparseTensor` features (`keras.Input(sparse=True)`) from `tf.data`;
- `tf.RaggedTensor` features (`keras.Input(ragged=True)`) from `tf.data`;
- `sample_weight=None` and an optional dict input given as None (arrays);
- a dataset of `(x, y, None)` or `(x, y, None)`-like tuples: TF's
  distributed input cannot carry the None (`AttributeError:
  'NoneTensorSpec' object has no attribute 'shape'`), so `fit` and
  `evaluate` leave the trailing None out, as Keras reads it anyway
  (`tfdist_opt.keras.absent_inputs`); a None elsewhere in a dataset's
  elements is refused naming where.

Tolerance: rel 1e-5, abs 1e-6 (float32; the all-reduce sums the two halves
of each batch in another order).
"""

import contextlib

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfdist_opt

pytestmark = pytest.mark.usefixtures("no_tf_config")

N = 8
RNG = np.random.RandomState(0)
DENSE = (RNG.rand(N, 4) * (RNG.rand(N, 4) > 0.5)).astype("float32")
X = RNG.rand(N, 3).astype("float32")
Y = RNG.rand(N, 1).astype("float32")
RAGGED = [[1, 2], [3], [4, 5, 6], [7], [1], [2, 2], [3, 3, 3], [4]]


class _RowMean(keras.layers.Layer):
    def call(self, x):
        return tf.reduce_mean(tf.cast(x, "float32"), axis=1, keepdims=True)


class _AddOptional(keras.layers.Layer):
    def call(self, a, b=None):
        return a if b is None else a + b


def _dense_on(inputs, features):
    return keras.Model(inputs, keras.layers.Dense(1, kernel_initializer="ones")(features))


def _sparse():
    i = keras.Input((4,), sparse=True)
    data = tf.data.Dataset.from_tensor_slices((tf.sparse.from_dense(DENSE), Y)).batch(4)
    return _dense_on(i, i), {"x": data}


def _ragged():
    i = keras.Input((None,), ragged=True, dtype="int32")
    rows = tf.ragged.constant(RAGGED, dtype=tf.int32)
    data = tf.data.Dataset.from_tensor_slices((rows, Y)).batch(4)
    return _dense_on(i, _RowMean()(i)), {"x": data}


def _optional_dict_input():
    a, b = keras.Input((3,), name="a"), keras.Input((3,), name="b", optional=True)
    model = _dense_on({"a": a, "b": b}, _AddOptional()(a, b))
    return model, {"x": {"a": X, "b": None}, "y": Y, "batch_size": 4, "shuffle": False}


def _sample_weight_none():
    i = keras.Input((3,))
    data = {"x": X, "y": Y, "sample_weight": None, "batch_size": 4, "shuffle": False}
    return _dense_on(i, i), data


def _dataset_none_weight():
    i = keras.Input((3,))
    data = tf.data.Dataset.from_tensor_slices((X, Y)).batch(4).map(lambda a, b: (a, b, None))
    return _dense_on(i, i), {"x": data}


CASES = {
    "sparse": _sparse,
    "ragged": _ragged,
    "optional_dict_input": _optional_dict_input,
    "sample_weight_none": _sample_weight_none,
    "dataset_none_weight": _dataset_none_weight,
}


def _run(case, strategy):
    with strategy.scope() if strategy else contextlib.nullcontext():
        model, data = CASES[case]()
        model.compile(keras.optimizers.SGD(0.1), "mse")
    history = model.fit(**data, epochs=2, verbose=0).history
    data.pop("shuffle", None)
    evaluation = model.evaluate(**data, verbose=0)
    return history["loss"], evaluation, model.get_weights()


@pytest.mark.parametrize("case", sorted(CASES))
def test_trains_on_two_replicas_as_on_one_device(case):
    want_loss, want_eval, want_weights = _run(case, None)
    strategy = tfdist_opt.opt_strategy(cpu_replicas=2)
    assert strategy.num_replicas_in_sync == 2
    loss, evaluation, weights = _run(case, strategy)
    np.testing.assert_allclose(loss, want_loss, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(evaluation, want_eval, rtol=1e-5, atol=1e-6)
    for got, want in zip(weights, want_weights):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_a_none_inside_the_inputs_of_a_dataset_is_refused_naming_it():
    """An optional input left None in a dataset changes the structure the
    model is called with: refused before any step, naming where it is."""
    strategy = tfdist_opt.opt_strategy(cpu_replicas=2)
    with strategy.scope():
        model, _ = _optional_dict_input()
        model.compile(keras.optimizers.SGD(0.1), "mse")
    data = tf.data.Dataset.from_tensor_slices(({"a": X}, Y)).batch(4)
    data = data.map(lambda x, y: ({"a": x["a"], "b": None}, y))
    with pytest.raises(ValueError, match=r"Invalid value for `x`: .* None at element\[0\]\['b'\]"):
        model.fit(data, epochs=1, verbose=0)
