"""tf_keras (TF_USE_LEGACY_KERAS=1) under opt_strategy() on a PS cluster: native fit."""

import json
import os
import sys

import numpy as np

import tfdist_opt

strategy = tfdist_opt.opt_strategy()
import tensorflow as tf  # noqa: E402
import tf_keras  # noqa: E402

x = np.random.default_rng(0).normal(size=(256, 4)).astype("float32")
y = x @ np.array([[1.0], [-2.0], [3.0], [0.5]], "float32")


def dataset_fn(input_context):
    return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(256).repeat().batch(16)


with strategy.scope():
    model = tf_keras.Sequential([tf_keras.layers.Dense(1, input_shape=(4,))])
    model.compile(tf_keras.optimizers.SGD(0.05), "mse")
hist = model.fit(
    tf_keras.utils.experimental.DatasetCreator(dataset_fn), epochs=3, steps_per_epoch=10, verbose=0
)
print(
    "RESULT "
    + json.dumps(
        {
            "strategy": type(strategy).__name__,
            "loss": hist.history["loss"],
            "iterations": int(model.optimizer.iterations.numpy()),
            "kernel_device": model.weights[0].device,
        }
    ),
    flush=True,
)
sys.stdout.flush()
os._exit(0)
