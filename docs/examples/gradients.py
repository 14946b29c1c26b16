"""Gradient communication knobs, on any strategy: packing, compression, accumulation."""

import numpy as np

import tfdist_opt

strategy = tfdist_opt.opt_strategy(grad_accum=2, compression="bf16", bytes_per_pack="auto")
import keras  # noqa: E402

x = np.random.default_rng(0).normal(size=(256, 16)).astype("float32")
y = x[:, :1] - x[:, 1:2]
with strategy.scope():
    model = keras.Sequential(
        [keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
# Each step of fit is one micro-batch; every 2 steps make one update.
model.fit(x, y, batch_size=32, epochs=2, verbose=2)
print("updates:", int(model.optimizer.iterations.numpy()))
