"""Keras's own file-writing callbacks from every worker on one shared directory.

argv: SHARED_DIR MODE [SPLIT_DIR] (MODE "crash": exit 3 right after epoch
2's backup; "resume": run to the end; "refuse_then_resume": first fit with
every callback in SPLIT_DIR, which must be refused before step 1 (printed as
`REFUSED <error>`), then, in the same process and cluster, "resume" in
SHARED_DIR). `{task}` in a directory is replaced by the task
index (a directory per worker, as when each host has its own disk). Both workers fit 4 epochs with
keras.callbacks.BackupAndRestore(SHARED/backup), ModelCheckpoint into a
directory that does not exist yet (SHARED/ckpts/ep{epoch}.keras) and
CSVLogger(SHARED/log.csv, append=True), unchanged from single-process code.
Prints `RESULT {"chief", "start_epoch", "w", "classes"}` at the end.
"""

import json
import os
import sys

import numpy as np

import tfdist_opt

X = np.arange(32, dtype="float32").reshape(16, 2) / 16.0
Y = (X @ np.array([[1.5], [-2.0]], dtype="float32")) + 0.25
EPOCHS, CRASH_AFTER_EPOCH = 4, 2


def main():
    task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    shared, mode = sys.argv[1].format(task=task), sys.argv[2]
    split = sys.argv[3].format(task=task) if mode == "refuse_then_resume" else None
    strategy = tfdist_opt.opt_strategy()
    import keras
    import tensorflow as tf

    with strategy.scope():
        model = keras.Sequential(
            [
                keras.Input((2,)),
                keras.layers.Dense(1, kernel_initializer="zeros", bias_initializer="zeros"),
            ]
        )
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    ds = tf.data.Dataset.from_tensor_slices((X, Y)).batch(8).with_options(options)
    seen = []

    class Crash(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            seen.append(epoch)

        def on_epoch_end(self, epoch, logs=None):
            if mode == "crash" and epoch + 1 == CRASH_AFTER_EPOCH:
                print("CRASHING", flush=True)
                os._exit(3)

    def callbacks_in(directory):
        return [
            keras.callbacks.BackupAndRestore(os.path.join(directory, "backup")),
            keras.callbacks.ModelCheckpoint(os.path.join(directory, "ckpts", "ep{epoch}.keras")),
            keras.callbacks.CSVLogger(os.path.join(directory, "log.csv"), append=True),
            Crash(),
        ]

    if split is not None:  # a restart with a backup_dir per host: refused
        try:
            model.fit(ds, epochs=EPOCHS, verbose=0, callbacks=callbacks_in(split))
            print("NOT REFUSED", flush=True)
            sys.exit(1)
        except Exception as e:  # pylint: disable=broad-except
            print(f"REFUSED {type(e).__name__}: {e}", flush=True)
        seen.clear()
    callbacks = callbacks_in(shared)
    model.fit(ds, epochs=EPOCHS, verbose=0, callbacks=callbacks)
    w = np.concatenate([v.numpy().ravel() for v in model.weights])
    tf_config = json.loads(os.environ["TF_CONFIG"])
    print(
        "RESULT "
        + json.dumps(
            {
                "chief": tf_config["task"]["index"] == 0,
                "start_epoch": seen[0],
                "w": w.tolist(),
                "classes": [type(c).__name__ for c in callbacks],
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
