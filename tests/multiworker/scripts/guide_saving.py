"""The Keras guide's saving patterns, unchanged, on shared or per-host storage.

argv: SHARED_DIR HOST_DIR MODE. The script runs twice in one process: first
in SHARED_DIR (every worker's working directory: shared storage) to the end,
then in HOST_DIR (`{task}` replaced by the task index, as `launch -- bash -c
'mkdir -p host$I && cd host$I && exec python train.py'` gives hosts with
their own disks), where MODE "crash" exits 3 right after epoch 2's saves and
"resume" runs to the end. Every path below is relative, as in the guides:

1. `make_or_restore_model()` (keras.io multi-worker guide): restore the
   newest file in `./ckpt` if there is one, else build a new model;
2. `fit` with `ModelCheckpoint`s (a `.keras` file and weights per epoch) and
   Keras's own `BackupAndRestore("./backup")`, then `load_weights` of the
   newest weights file;
3. `model.save("m.keras")` then `keras.models.load_model("m.keras")`.

Prints `RESULT shared|host {"restored", "start_epoch", "w", "newest_weights",
"w_loaded_weights", "w_load_model", "scratch"}` after each; "scratch" lists
the temporary directories this worker saved into instead (`scratch_log`).
"""

import json
import os
import sys

import numpy as np

task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
shared_dir, host_dir, mode = sys.argv[1], sys.argv[2].format(task=task), sys.argv[3]

import scratch_log  # noqa: E402  (this script's directory)
import tfdist_opt  # noqa: E402

X = np.arange(32, dtype="float32").reshape(16, 2) / 16.0
Y = (X @ np.array([[1.5], [-2.0]], dtype="float32")) + 0.25
EPOCHS, CRASH_AFTER_EPOCH = 4, 2
CHECKPOINT_DIR = "./ckpt"


def flat(model):
    return np.concatenate([v.numpy().ravel() for v in model.weights]).tolist()


def guide(strategy, crash):
    import keras
    import tensorflow as tf

    os.makedirs(CHECKPOINT_DIR, exist_ok=True)  # the guide's, without its race
    restored = []

    def make_or_restore_model():
        checkpoints = [CHECKPOINT_DIR + "/" + name for name in os.listdir(CHECKPOINT_DIR)]
        if checkpoints:
            latest = max(checkpoints, key=os.path.getctime)
            restored.append(os.path.basename(latest))
            return keras.models.load_model(latest)
        restored.append(None)
        model = keras.Sequential(
            [
                keras.Input((2,)),
                keras.layers.Dense(1, kernel_initializer="zeros", bias_initializer="zeros"),
            ]
        )
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
        return model

    with strategy.scope():
        model = make_or_restore_model()
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    ds = tf.data.Dataset.from_tensor_slices((X, Y)).batch(8).with_options(options)
    seen = []

    class Crash(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            seen.append(epoch)

        def on_epoch_end(self, epoch, logs=None):
            if crash and epoch + 1 == CRASH_AFTER_EPOCH:
                print("CRASHING", flush=True)
                os._exit(3)

    callbacks = [
        keras.callbacks.BackupAndRestore("./backup"),
        keras.callbacks.ModelCheckpoint(CHECKPOINT_DIR + "/ckpt-{epoch}.keras"),
        keras.callbacks.ModelCheckpoint("./weights/w-{epoch}.weights.h5", save_weights_only=True),
        Crash(),
    ]
    model.fit(ds, epochs=EPOCHS, verbose=0, callbacks=callbacks)
    w = flat(model)
    newest = sorted(os.listdir("weights"))[-1]
    model.load_weights(os.path.join("weights", newest))
    model.save("m.keras")
    loaded = keras.models.load_model("m.keras")
    return {
        "restored": restored[0],
        "start_epoch": seen[0],
        "w": w,
        "w_loaded_weights": flat(model),
        "w_load_model": flat(loaded),
        "newest_weights": newest,
        "scratch": scratch_log.take(),
    }


def main():
    scratch_log.install()
    strategy = tfdist_opt.opt_strategy()
    for label, workdir in (("shared", shared_dir), ("host", host_dir)):
        os.makedirs(workdir, exist_ok=True)
        os.chdir(workdir)
        result = guide(strategy, crash=label == "host" and mode == "crash")
        print(f"RESULT {label} " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
