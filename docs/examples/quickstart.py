import keras
import numpy as np

import tfdist_opt

strategy = tfdist_opt.opt_strategy()  # reads TF_CONFIG, devices, config file, env
x = np.random.default_rng(0).normal(size=(512, 8)).astype("float32")
y = x.sum(axis=1, keepdims=True)
with strategy.scope():  # build and compile the model inside the scope
    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(optimizer=keras.optimizers.SGD(0.01), loss="mse")
history = model.fit(x, y, batch_size=64, epochs=3, verbose=2)
print("replicas:", strategy.num_replicas_in_sync, "loss:", history.history["loss"][-1])
