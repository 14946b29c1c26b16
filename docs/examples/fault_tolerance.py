"""Backups that resume mid-epoch with the optimizer state: DistributedBackupAndRestore."""

import sys
import tempfile

import numpy as np

import tfdist_opt

strategy = tfdist_opt.opt_strategy()
import keras  # noqa: E402

backup_dir = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp()
epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 2
x = np.random.default_rng(0).normal(size=(256, 4)).astype("float32")
y = x.sum(axis=1, keepdims=True)
with strategy.scope():
    keras.utils.set_random_seed(0)  # the same start (and shuffles) in every run
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss="mse")
backup = tfdist_opt.DistributedBackupAndRestore(
    backup_dir, save_freq=4, keep=2, delete_on_end=False
)
# Stopped after epoch 1 (`python fault_tolerance.py DIR 1`), a rerun with the same
# DIR resumes there: `python fault_tolerance.py DIR 2` trains epoch 2 only.
model.fit(x, y, batch_size=32, epochs=epochs, verbose=2, callbacks=[backup])
print("optimizer steps so far:", int(model.optimizer.iterations.numpy()))
