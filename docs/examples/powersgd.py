"""PowerSGD: low-rank gradient all-reduce with error feedback."""
import numpy as np

import tfdist_opt

strategy = tfdist_opt.opt_strategy(compression="powersgd", powersgd_rank=4,
                                   powersgd_start_step=2, powersgd_min_compression=2)
import keras  # noqa: E402

x = np.random.default_rng(0).normal(size=(512, 64)).astype("float32")
y = (x[:, :10] > 0).argmax(axis=1)
with strategy.scope():
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(256, activation="tanh"),
                              keras.layers.Dense(10)])
    model.compile(optimizer=keras.optimizers.SGD(0.02, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(x, y, batch_size=64, epochs=2, verbose=2)
