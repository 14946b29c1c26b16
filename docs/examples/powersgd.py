"""PowerSGD: low-rank gradient all-reduce with error feedback."""

import numpy as np

import tfdist_opt

strategy = tfdist_opt.opt_strategy(
    compression="powersgd", powersgd_rank=4, powersgd_start_step=2, powersgd_min_compression=2
)
import keras  # noqa: E402

x = np.random.default_rng(0).normal(size=(512, 64)).astype("float32")
y = (x[:, :10] > 0).argmax(axis=1)
with strategy.scope():
    model = keras.Sequential(
        [keras.Input((64,)), keras.layers.Dense(256, activation="tanh"), keras.layers.Dense(10)]
    )
    model.compile(
        optimizer=keras.optimizers.SGD(0.02, momentum=0.9),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )


class CompressedUpdates(keras.callbacks.Callback):
    """Counts the updates that ran compressed: only those move the Q factors."""

    def on_train_begin(self, logs=None):
        self.count, self.last = 0, None

    def on_train_batch_end(self, batch, logs=None):
        qs = [v.numpy().copy() for v in self.model.optimizer.variables if "powersgd_q" in v.path]
        if self.last is not None and any((a != b).any() for a, b in zip(qs, self.last)):
            self.count += 1
        self.last = qs


counter = CompressedUpdates()
model.fit(x, y, batch_size=64, epochs=2, verbose=2, callbacks=[counter])
# Updates 0 and 1 run uncompressed (powersgd_start_step=2): 14 of 16 compress.
print(f"compressed updates: {counter.count} of {int(model.optimizer.iterations.numpy())}")
