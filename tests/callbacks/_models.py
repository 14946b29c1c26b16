"""Tiny models and data shared by the in-process callback tests."""

import keras
import numpy as np
import tensorflow as tf

GLOBAL_BATCH = 8


def dataset(n=64, batch=GLOBAL_BATCH):
    rng = np.random.RandomState(0)
    x = rng.rand(n, 4).astype("float32")
    y = x @ np.array([[1.0], [-2.0], [0.5], [3.0]], "float32")
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch)


def model(strategy, lr=0.02, momentum=0.9, width=8):
    keras.utils.set_random_seed(1)
    with strategy.scope():
        m = keras.Sequential(
            [keras.Input((4,)), keras.layers.Dense(width, "tanh"), keras.layers.Dense(1)]
        )
        m.compile(keras.optimizers.SGD(lr, momentum=momentum), "mse")
    return m
