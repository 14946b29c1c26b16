"""One script for every task of a real PS cluster (chief, workers, ps).

`opt_strategy()` serves on worker/ps tasks (and exits 0 when the chief is
done); on the chief it returns the strategy and this trains. Options via
environment: PS_EPOCHS, PS_STEPS, PS_BACKUP (dir), PS_STEP_SLEEP (seconds a
step sleeps on the worker, to give a test time to kill one), PS_MARK (file
the chief writes after the first epoch).
"""

import json
import os
import sys

import numpy as np

import tfdist_opt
from tfdist_opt import parameter_server as ps

strategy = tfdist_opt.opt_strategy()
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

epochs = int(os.environ.get("PS_EPOCHS", "3"))
steps = int(os.environ.get("PS_STEPS", "20"))
sleep_s = float(os.environ.get("PS_STEP_SLEEP", "0"))
rng = np.random.default_rng(0)
x = rng.normal(size=(256, 4)).astype("float32")
y = x @ np.array([[1.0], [-2.0], [3.0], [0.5]], "float32")


class Mark(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        if os.environ.get("PS_MARK"):
            with open(os.environ["PS_MARK"] + f".{epoch}", "w") as f:
                f.write("x")


def dataset_fn(input_context):
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(256).batch(16)
    if sleep_s:
        ds = ds.map(lambda a, b: (tf.py_function(lambda: __import__("time").sleep(sleep_s)
                                                 or 0.0, [], tf.float32) + a, b))
    return ds


with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(0.05), "mse")
callbacks = [Mark()]
if os.environ.get("PS_BACKUP"):
    callbacks.append(ps.BackupAndRestore(os.environ["PS_BACKUP"]))
hist = ps.fit(model, dataset_fn, epochs=epochs, steps_per_epoch=steps, verbose=0,
              callbacks=callbacks)
print("RESULT " + json.dumps({
    "strategy": type(strategy).__name__,
    "loss": hist.history["loss"],
    "epochs_run": len(hist.history["loss"]),
    "iterations": int(model.optimizer.iterations.numpy()),
    "restored_epoch": callbacks[-1].restored_epoch if os.environ.get("PS_BACKUP") else None,
}), flush=True)
sys.stdout.flush()
os._exit(0)
