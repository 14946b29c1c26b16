"""The pure parts of plain `model.fit` under parameter servers: no cluster, milliseconds.

validation_split and class_weight must mean what they mean in Keras 3's
own fit; bad arguments are refused by name before anything runs.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras.src.trainers.data_adapters import array_slicing
from keras.src.trainers.data_adapters import data_adapter_utils

from tfdist_opt import _class_swap
from tfdist_opt.parameter_server import data as data_lib
from tfdist_opt.parameter_server import keras_model
from tfdist_opt.parameter_server import training

X = np.arange(40, dtype="float32").reshape(10, 4)
Y = np.arange(10, dtype="float32").reshape(10, 1)


def test_validation_split_is_keras_split():
    (x, y, sw), (vx, vy, vsw) = data_lib.split_validation(X, Y, None, 0.25)
    (kx, ky, _), (kvx, kvy, _) = array_slicing.train_validation_split(
        (X, Y, None), validation_split=0.25
    )
    for ours, theirs in ((x, kx), (y, ky), (vx, kvx), (vy, kvy)):
        np.testing.assert_array_equal(ours, theirs)
    assert sw is None and vsw is None


@pytest.mark.parametrize(
    "x,split,match",
    [
        (tf.data.Dataset.from_tensor_slices(X), 0.2, "splits arrays only"),
        (X, 1.5, r"expected a float in \(0, 1\)"),
        (X[:1], 0.5, "1 rows cannot be split"),
    ],
)
def test_validation_split_refused_by_name(x, split, match):
    with pytest.raises(ValueError, match=r"Invalid value for `validation_split`.*" + match):
        data_lib.split_validation(x, None, None, split)


@pytest.mark.parametrize(
    "y",
    [
        np.array([0, 1, 2, 1], "int32"),
        np.array([[0], [1], [2], [1]], "float32"),
        np.eye(3, dtype="float32")[[0, 1, 2, 1]],
    ],
)
def test_class_weight_gives_keras_sample_weights(y):
    cw = {0: 0.5, 1: 2.0, 2: 4.0}
    ds = tf.data.Dataset.from_tensor_slices((np.zeros((4, 2), "float32"), y)).batch(4)
    weigh = data_lib.class_weight_fn(cw, ds.element_spec)
    _, _, sw = next(iter(weigh(ds)))
    expected = data_adapter_utils.class_weight_to_sample_weights(y, cw)
    np.testing.assert_allclose(sw.numpy(), expected)


@pytest.mark.parametrize(
    "cw,spec_parts,match",
    [
        ({0: 1.0}, 3, "already carries sample weights"),
        ({0: 1.0}, 1, "has no targets"),
        ({"a": 1.0}, 2, "expected a non-empty dict"),
        ({}, 2, "expected a non-empty dict"),
    ],
)
def test_class_weight_refused_by_name(cw, spec_parts, match):
    s = tf.TensorSpec((None, 1), tf.float32)
    spec = (s, s, s)[:spec_parts] if spec_parts > 1 else s
    with pytest.raises(ValueError, match=r"Invalid value for `class_weight`: .*" + match):
        data_lib.class_weight_fn(cw, spec)


def test_dataset_arguments_refused_by_name():
    ds = tf.data.Dataset.from_tensor_slices((X, Y)).batch(2)
    with pytest.raises(ValueError, match="Invalid value for `batch_size`.*batch_size=8"):
        data_lib.chief_dataset(ds, batch_size=8)
    with pytest.raises(ValueError, match="Invalid value for `y`"):
        data_lib.chief_dataset(ds, Y)


def test_strategy_made_distributed_dataset_refused():
    dist = tf.distribute.MirroredStrategy(["/cpu:0"]).distribute_datasets_from_function(
        lambda ctx: tf.data.Dataset.from_tensor_slices(X).batch(2)
    )
    with pytest.raises(TypeError, match="Invalid value for `x`: a distributed dataset"):
        data_lib.dataset_function(dist)
    fn = lambda ctx: None  # noqa: E731
    assert data_lib.dataset_function(fn) == (fn, None)


def test_custom_train_step_refused_before_anything_runs():
    class Custom(keras.Sequential):
        def train_step(self, data):
            return {}

    model = Custom([keras.Input((4,)), keras.layers.Dense(1)])
    with pytest.raises(ValueError, match="Custom overrides `train_step`"):
        training.fit(model, X, Y)


def test_routed_model_refuses_unknown_evaluate_keywords():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.__class__ = _class_swap.cached_subclass(keras_model.CoordinatorTraining, type(model))
    assert type(model).__name__ == "Sequential"
    with pytest.raises(TypeError, match=r"Invalid keyword argument.*\['bogus'\]"):
        model.evaluate(X, Y, bogus=1)
