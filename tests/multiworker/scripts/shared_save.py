"""Saves from every worker into one shared directory (argv[1]) (issue 17).

Both workers: fit with keras.callbacks.ModelCheckpoint into the directory,
model.save(dir/m.keras), model.save_weights(dir/m.weights.h5),
model.export(dir/export); then, after a barrier (evaluate), reload m.keras
inside the scope and train it on per-worker data (it must all-reduce: both
workers end equal) and predict, and reload it outside the scope and train
the same way (Keras gives it the default strategy: the workers diverge).
Prints `RESULT {"chief": bool, "class": name, "w": [...], "scratch": [...],
...}`, "scratch" listing the temporary directories this worker saved into
instead of the shared one, with their files (`scratch_log`).
"""

import json
import os
import sys

import numpy as np

import scratch_log  # this script's directory
import tfdist_opt
from tfdist_opt.strategy.saving import chief_saving

X = np.arange(16, dtype="float32").reshape(8, 2) / 8.0
Y = (X @ np.array([[1.5], [-2.0]], dtype="float32")) + 0.25


def main():
    shared = sys.argv[1]
    scratch_log.install()
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
    model.export(os.path.join(shared, "export"), verbose=False)
    w = np.concatenate([v.numpy().ravel() for v in model.weights])
    model.evaluate(ds, verbose=0)  # a barrier: the chief's files are complete
    scratch = scratch_log.take()  # where this worker's saves went instead

    task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    local = tf.data.Dataset.from_tensor_slices((X * (1 + task), Y)).batch(8)

    def flat(m):
        return np.concatenate([v.numpy().ravel() for v in m.weights]).tolist()

    with strategy.scope():
        inside = keras.models.load_model(os.path.join(shared, "m.keras"))
    inside.fit(local, epochs=1, verbose=0)
    outside = keras.models.load_model(os.path.join(shared, "m.keras"))
    outside.fit(local, epochs=1, verbose=0)
    print(
        "RESULT "
        + json.dumps(
            {
                "chief": task == 0,
                "class": type(model).__mro__[0].__module__
                + ":"
                + str(isinstance(model, chief_saving.ChiefSaving)),
                "w": w.tolist(),
                "inside_w": flat(inside),
                "inside_predict": inside.predict(ds, verbose=0).ravel().tolist(),
                "outside_strategy": type(outside.distribute_strategy).__name__,
                "outside_w": flat(outside),
                "pid": os.getpid(),
                "scratch": scratch,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
