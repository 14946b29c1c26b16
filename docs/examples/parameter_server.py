"""Parameter-server training with Keras 3 `fit`; one script for every task:

tfdist-opt launch --workers 2 --ps 1 -- python parameter_server.py
"""

import numpy as np

import tfdist_opt

strategy = tfdist_opt.opt_strategy()  # on worker and ps tasks: serves, exits 0 at the end
import keras  # noqa: E402

rng = np.random.default_rng(0)
ids = rng.integers(0, 10_000, size=(2048, 4))
y = (ids % 2 == 0).mean(axis=1, keepdims=True).astype("float32")
with strategy.scope():  # the 10,000 x 16 table is sharded over the ps tasks
    model = keras.Sequential(
        [
            keras.Input((4,), dtype="int64"),
            keras.layers.Embedding(10_000, 16),
            keras.layers.Flatten(),
            keras.layers.Dense(1),
        ]
    )
    model.compile(keras.optimizers.Adam(1e-2), "mse")
history = model.fit(ids, y, batch_size=64, epochs=2, steps_per_epoch=8, verbose=2)
print("chief: iterations", int(model.optimizer.iterations.numpy()), "loss", history.history["loss"])
