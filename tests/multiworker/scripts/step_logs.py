"""A Keras callback keeping every training step's logs (shared by scripts)."""

import keras


class Logs(keras.callbacks.Callback):
    """`steps`: one {name: float} per training batch, names sorted."""

    def __init__(self):
        super().__init__()
        self.steps = []

    def on_train_batch_end(self, batch, logs=None):
        self.steps.append({k: float(v) for k, v in sorted(logs.items())})
