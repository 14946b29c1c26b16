"""Builds opt_strategy() twice in one worker and trains under the second.

Prints `RESULT {"replicas": R, "sum": S, "w": [...]}`: S is the all-reduced
sum of (task index + 1) under the second strategy, w the weights of a
linear model trained full-batch with SGD under it.
"""

import json
import os
import time

import numpy as np

import tfdist_opt

X = np.arange(16, dtype="float32").reshape(8, 2) / 8.0
Y = (X @ np.array([[1.5], [-2.0]], dtype="float32")) + 0.25
LR, EPOCHS = 0.1, 3


def main():
    first = tfdist_opt.opt_strategy()
    index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    # TWICE_TRAIN_LAG_S: this many seconds on task 0 between the two calls,
    # so that task 1 builds its second strategy (and reaches the first
    # collective) while task 0 still runs the first one.
    if index == 0:
        time.sleep(float(os.environ.get("TWICE_TRAIN_LAG_S", "0")))
    second = tfdist_opt.opt_strategy()
    import keras
    import tensorflow as tf

    value = second.reduce("SUM", second.run(lambda: tf.constant(float(index + 1))), axis=None)
    with second.scope():
        model = keras.Sequential(
            [
                keras.Input((2,)),
                keras.layers.Dense(1, kernel_initializer="zeros", bias_initializer="zeros"),
            ]
        )
        model.compile(optimizer=keras.optimizers.SGD(LR), loss="mse")
    ds = tf.data.Dataset.from_tensor_slices((X, Y)).batch(8)
    model.fit(ds, epochs=EPOCHS, verbose=0, shuffle=False)
    w = np.concatenate([v.numpy().ravel() for v in model.weights])
    print(
        "RESULT "
        + json.dumps(
            {
                "replicas": second.num_replicas_in_sync,
                "first": first.num_replicas_in_sync,
                "sum": float(value),
                "w": w.tolist(),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
