"""tfdist_opt's Keras callbacks, in the order they must run."""

import tempfile

import numpy as np

import tfdist_opt
from tfdist_opt import callbacks as cbs

strategy = tfdist_opt.opt_strategy()
import keras  # noqa: E402

global_batch = 64
x = np.random.default_rng(0).normal(size=(1024, 8)).astype("float32")
y = x.sum(axis=1, keepdims=True)
with strategy.scope():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9), loss="mse")
callbacks = cbs.ordered(
    [  # sorts ours before Keras's writers of `logs`
        keras.callbacks.CSVLogger(tempfile.mktemp(suffix=".csv")),
        cbs.ThroughputMonitor(global_batch_size=global_batch, verbose=0),
        cbs.ScaledLearningRate(
            base_lr=0.01, base_batch_size=32, global_batch_size=global_batch, warmup_steps=8
        ),
    ]
)
history = model.fit(x, y, batch_size=global_batch, epochs=2, verbose=2, callbacks=callbacks)
print("examples/sec:", history.history["examples_per_sec"][-1])
