"""One script for every task of a real PS cluster (chief, workers, ps).

`opt_strategy()` serves on worker/ps tasks (and exits 0 when the chief is
done); on the chief it returns the strategy and this trains. Options via
environment: PS_EPOCHS, PS_STEPS, PS_BACKUP (dir), PS_MARK (file
prefix the chief writes after each epoch), PS_TRACE_DIR (a relative dir: each
worker's pipeline rewrites DIR/batches, under its cwd, with each batch), PS_STOP (a file: once it
exists, training stops at the next epoch end).
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

tf.get_logger().setLevel("INFO")  # the coordinator's worker-recovery lines

epochs = int(os.environ.get("PS_EPOCHS", "3"))
steps = int(os.environ.get("PS_STEPS", "20"))
trace_dir = os.environ.get("PS_TRACE_DIR")
rng = np.random.default_rng(0)
x = rng.normal(size=(256, 4)).astype("float32")
y = x @ np.array([[1.0], [-2.0], [3.0], [0.5]], "float32")


class Mark(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        if os.environ.get("PS_STOP") and os.path.exists(os.environ["PS_STOP"]):
            self.model.stop_training = True
        if os.environ.get("PS_MARK"):
            with open(os.environ["PS_MARK"] + f".{epoch}", "w") as f:
                f.write("x")


def dataset_fn(input_context):
    ds = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(256).batch(16)
    if trace_dir:
        # A TF op, so it runs in the worker process that makes the batch
        # (a py_function would run on the chief).
        # A relative path resolves in the worker's working directory, which
        # tells workers apart (TF gives every PS worker input_pipeline_id 0).
        path = os.path.join(trace_dir, "batches")

        def touch(a, b):
            with tf.control_dependencies([tf.io.write_file(path, "x")]):
                return tf.identity(a), b

        ds = ds.map(touch)
    return ds


with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(0.05), "mse")
backup = ps.BackupAndRestore(os.environ["PS_BACKUP"]) if os.environ.get("PS_BACKUP") else None
callbacks = ([backup] if backup else []) + [Mark()]  # marks follow the save
hist = ps.fit(
    model, dataset_fn, epochs=epochs, steps_per_epoch=steps, verbose=0, callbacks=callbacks
)
print(
    "RESULT "
    + json.dumps(
        {
            "strategy": type(strategy).__name__,
            "loss": hist.history["loss"],
            "epochs_run": len(hist.history["loss"]),
            "iterations": int(model.optimizer.iterations.numpy()),
            "steps_completed": hist.steps_completed,
            "restored_epoch": backup.restored_epoch if backup else None,
        }
    ),
    flush=True,
)
sys.stdout.flush()
os._exit(0)
