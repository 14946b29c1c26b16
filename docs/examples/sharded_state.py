"""ZeRO stage 1: each replica keeps 1/n of every optimizer slot."""

import numpy as np

import tfdist_opt

strategy = tfdist_opt.opt_strategy(shard_optimizer_state=True)
import keras  # noqa: E402

x = np.random.default_rng(0).normal(size=(256, 32)).astype("float32")
y = x.mean(axis=1, keepdims=True)
with strategy.scope():
    model = keras.Sequential(
        [keras.Input((32,)), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
model.fit(x, y, batch_size=32, epochs=2, verbose=2)
slots = [v for v in model.optimizer.variables if "momentum" in v.path]
print("first Adam slot per replica:", slots[0].shape, "of kernel", model.weights[0].shape)
