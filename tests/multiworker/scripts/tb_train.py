"""Worker script: TensorBoard output of a 2-worker fit.

Usage: python tb_train.py OUT_DIR
Writes OUT_DIR/tb (ThroughputMonitor + CommunicationProfiler scalars and
ChiefTensorBoard) and OUT_DIR/tb_plain (Keras's own TensorBoard, made
chief-only by tfdist_opt at fit); prints `PID <task> <pid>`.
"""

import os
import sys

import tfdist_opt  # noqa: E402

strategy = tfdist_opt.opt_strategy(all_reduce="ring")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tfdist_opt import callbacks as cbs  # noqa: E402
from tfdist_opt.callbacks import _common  # noqa: E402

GLOBAL_BATCH = 8


def main(out_dir):
    print(f"PID {_common.task_tag()} {os.getpid()}", flush=True)
    keras.utils.set_random_seed(1)
    rng = np.random.RandomState(0)
    x = rng.rand(64, 4).astype("float32")
    y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], "float32")).astype("float32")
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)
    with strategy.scope():
        model = keras.Sequential(
            [keras.Input((4,)), keras.layers.Dense(8, "tanh"), keras.layers.Dense(1)]
        )
        model.compile(keras.optimizers.SGD(0.02), "mse")
    tb = os.path.join(out_dir, "tb")
    model.fit(
        ds,
        epochs=2,
        verbose=0,
        callbacks=cbs.ordered(
            [
                cbs.ChiefTensorBoard(tb),
                keras.callbacks.TensorBoard(os.path.join(out_dir, "tb_plain")),
                cbs.ThroughputMonitor(
                    GLOBAL_BATCH, warmup_steps=1, log_dir=tb, summary_freq=2, verbose=0
                ),
                cbs.CommunicationProfiler(probe_steps=3, log_dir=tb, verbose=0),
            ]
        ),
    )
    print(f"DONE {_common.task_tag()}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
