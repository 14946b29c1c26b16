"""Saves from every worker into one shared directory (argv[1]) (issue 17).

Both workers: fit with keras.callbacks.ModelCheckpoint into the directory,
model.save(dir/m.keras), model.save_weights(dir/m.weights.h5).
Prints `RESULT {"chief": bool, "class": name, "w": [...]}`.
"""

import json
import os
import sys

import numpy as np

import tfdist_opt
from tfdist_opt.strategy import chief_saving

X = np.arange(16, dtype="float32").reshape(8, 2) / 8.0
Y = (X @ np.array([[1.5], [-2.0]], dtype="float32")) + 0.25


def main():
    shared = sys.argv[1]
    strategy = tfdist_opt.opt_strategy()
    import keras
    import tensorflow as tf

    with strategy.scope():
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    ds = tf.data.Dataset.from_tensor_slices((X, Y)).batch(8)
    ckpt = keras.callbacks.ModelCheckpoint(os.path.join(shared, "ckpt.keras"))
    model.fit(ds, epochs=2, verbose=0, callbacks=[ckpt])
    model.save(os.path.join(shared, "m.keras"))
    model.save_weights(os.path.join(shared, "m.weights.h5"))
    w = np.concatenate([v.numpy().ravel() for v in model.weights])
    tf_config = json.loads(os.environ["TF_CONFIG"])
    print("RESULT " + json.dumps({
        "chief": tf_config["task"]["index"] == 0, "class": type(model).__mro__[0].__module__
        + ":" + str(isinstance(model, chief_saving.ChiefSaving)),
        "w": w.tolist()}), flush=True)


if __name__ == "__main__":
    main()
