"""A Keras callback keeping every training step's logs (shared by scripts)."""

import keras
import numpy as np


def data():
    """The scripts' 64 examples: x (64, 8) float32, y in {0, 1, 2}."""
    rng = np.random.default_rng(0)
    return (
        rng.normal(size=(64, 8)).astype("float32"),
        rng.integers(0, 3, size=(64,)).astype("int64"),
    )


class Logs(keras.callbacks.Callback):
    """`steps`: one {name: float} per training batch, names sorted."""

    def __init__(self):
        super().__init__()
        self.steps = []

    def on_train_batch_end(self, batch, logs=None):
        self.steps.append({k: float(v) for k, v in sorted(logs.items())})
