"""Recomputed activations: each residual block recomputed in its backward pass."""

import numpy as np

import tfdist_opt

strategy = tfdist_opt.opt_strategy()
import keras  # noqa: E402


class ResidualBlock(keras.layers.Layer):
    def __init__(self, width, **kwargs):
        super().__init__(**kwargs)
        self.hidden = keras.layers.Dense(4 * width, activation="relu")
        self.drop = keras.layers.Dropout(0.1)
        self.out = keras.layers.Dense(width)

    def call(self, x, training=None):
        return x + self.out(self.drop(self.hidden(x), training=training))


blocks = [f"block_{i}" for i in range(4)]
x = np.random.default_rng(0).normal(size=(256, 32)).astype("float32")
y = x.mean(axis=1, keepdims=True)
with strategy.scope():
    inputs = h = keras.Input((32,))
    # Only the named layers are recomputed: keep each block's input, not its insides.
    with keras.RematScope(mode="list_of_layers", layer_names=blocks):
        for name in blocks:
            h = ResidualBlock(32, name=name)(h)
    model = keras.Model(inputs, keras.layers.Dense(1)(h))
    model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
history = model.fit(x, y, batch_size=32, epochs=2, verbose=0)
losses = history.history["loss"]
print(f"{len(blocks)} blocks recomputed; loss fell: {losses[1] < losses[0]}")
