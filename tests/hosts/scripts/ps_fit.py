"""Plain Keras `model.fit` on a parameter-server cluster (or one process).

The same script on the chief, the workers and the ps tasks (their
`opt_strategy()` serves and exits 0). The chief (or the one process) prints
`RESULT {"iterations": ..., "kernel": [...], "expected": [...]}`.

Exact whatever the order of asynchronous steps: the loss `-mean((2y-1) * p)`
of a bias-free linear model from a zero kernel has a gradient that does not
depend on the weights, and each step sees all N rows as one batch, so after
k steps of SGD(lr) the kernel is `-k * lr * g` (float32 rounding) unless an
update was lost or repeated.
"""

import json

import numpy as np

import tfdist_opt

strategy = tfdist_opt.opt_strategy()
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

LR, N, EPOCHS, STEPS = 0.01, 64, 3, 5
rng = np.random.default_rng(0)
x = rng.normal(size=(N, 4)).astype("float32")
y = (x[:, :1] + 0.3 * x[:, 1:2] > 0).astype("float32")


def signed_loss(y_true, y_pred):
    return -keras.ops.mean((2.0 * y_true - 1.0) * y_pred, axis=-1)


with strategy.scope():
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(1, use_bias=False, kernel_initializer="zeros")]
    )
    model.compile(keras.optimizers.SGD(LR), signed_loss)
model.fit(
    tf.data.Dataset.from_tensor_slices((x, y)).batch(N).repeat(),
    epochs=EPOCHS,
    steps_per_epoch=STEPS,
    verbose=0,
)
steps = EPOCHS * STEPS
g = -((2 * y - 1) * x).sum(0, keepdims=True).T / N
print(
    "RESULT "
    + json.dumps(
        {
            "strategy": type(strategy).__name__,
            "iterations": int(model.optimizer.iterations.numpy()),
            "kernel": model.layers[-1].kernel.numpy().ravel().tolist(),
            "expected": (-steps * LR * g).ravel().tolist(),
        }
    ),
    flush=True,
)
