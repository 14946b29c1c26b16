"""Plain Keras `model.fit/evaluate/predict` on a real PS cluster; one script for every task.

Run by tests/parameter_server/test_keras_fit.py under `tfdist-opt launch
--workers 2 --ps 2`. On worker/ps tasks `opt_strategy()` serves and exits
0; on the chief this prints one `RESULT {json}` line.

Exactness without a fixed step order: the loss `-mean((2y - 1) * p)` of a
bias-free linear model has a gradient that does not depend on the weights,
and every step sees the whole (training) data as one batch, so after k
steps of SGD(lr), from any order of asynchronous steps, the kernel is
`w0 - k * lr * g` exactly (up to float32 rounding) unless an update was lost.
"""

import json
import os
import sys
import tempfile
import time

T0 = time.perf_counter()

import numpy as np

import tfdist_opt
from tfdist_opt import parameter_server as ps

strategy = tfdist_opt.opt_strategy(ps_min_shard_bytes=1024)
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from tfdist_opt.parameter_server import variables as variables_lib  # noqa: E402

LR = 0.01
N = 64
rng = np.random.default_rng(0)
x = rng.normal(size=(N, 4)).astype("float32")
y = (x[:, :1] + 0.3 * x[:, 1:2] > 0).astype("float32")


def signed_loss(y_true, y_pred):
    return -keras.ops.mean((2.0 * y_true - 1.0) * y_pred, axis=-1)


def grad(xs, ys, weights=None):
    """d loss / d kernel, as Keras reduces it (sum of weighted losses / rows)."""
    w = np.ones(len(xs), "float32") if weights is None else weights
    return -((w[:, None] * (2 * ys - 1)) * xs).sum(0, keepdims=True).T / len(xs)


class Recorder(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.calls = []

    def __getattribute__(self, name):
        if name.startswith("on_"):
            calls = object.__getattribute__(self, "calls")
            return lambda *a, **k: calls.append(name)
        return object.__getattribute__(self, name)


def kernel(model):
    return model.layers[-1].kernel.numpy().copy()


def steps_of(model):
    return int(model.optimizer.iterations.numpy())


out = {"strategy": type(strategy).__name__, "seconds": {"start": time.perf_counter() - T0}}


def lap(name):
    out["seconds"][name] = time.perf_counter() - T0


with strategy.scope():
    linear = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, use_bias=False)])
    linear.compile(keras.optimizers.SGD(LR), signed_loss, metrics=["mae"])
out["model_class"] = type(linear).__name__


def exact(name, fit, rows, labels, steps, weights=None):
    """Runs `fit()` and records how far the kernel is from `w0 - steps * lr * g`."""
    w0, it0 = kernel(linear), steps_of(linear)
    hist = fit()
    expected = w0 - steps * LR * grad(rows, labels, weights)
    out[name] = {
        "err": float(np.abs(kernel(linear) - expected).max()),
        "scale": float(np.abs(expected - w0).max()),
        "steps": steps_of(linear) - it0,
        "expected_steps": steps,
        "history": hist.history,
        "steps_completed": hist.steps_completed,
    }


# Arrays, validation_split (last quarter held out) and class_weight.
cw = {0: 1.0, 1: 3.0}
split = int(N * 0.75)
rec = Recorder()
exact(
    "arrays",
    lambda: linear.fit(
        x,
        y,
        batch_size=split,
        epochs=2,
        steps_per_epoch=5,
        validation_split=0.25,
        class_weight=cw,
        callbacks=[rec],
        verbose=0,
    ),
    x[:split],
    y[:split],
    10,
    np.where(y[:split, 0] > 0, 3.0, 1.0).astype("float32"),
)
val_numpy = float(np.mean(-(2 * y[split:, 0] - 1) * (x[split:] @ kernel(linear))[:, 0]))
out["arrays"]["val_loss_numpy"] = val_numpy
out["fit_calls"] = rec.calls
rec2 = Recorder()
ps.fit(
    linear,
    x,
    y,
    batch_size=split,
    epochs=2,
    steps_per_epoch=5,
    validation_split=0.25,
    class_weight=cw,
    callbacks=[rec2],
    verbose=0,
)
out["ps_fit_calls"] = rec2.calls

lap("arrays")
# A finite tf.data.Dataset (steps from its size), a dataset function, and a
# tfdist_opt.build_dataset pipeline (each worker reads all N rows).
exact(
    "dataset",
    lambda: linear.fit(tf.data.Dataset.from_tensor_slices((x, y)).batch(N), epochs=3, verbose=0),
    x,
    y,
    3,
)
exact(
    "dataset_fn",
    lambda: linear.fit(
        lambda ctx: tf.data.Dataset.from_tensor_slices((x, y)).shuffle(N).batch(N),
        epochs=2,
        steps_per_epoch=3,
        verbose=0,
    ),
    x,
    y,
    6,
)
exact(
    "build_dataset",
    lambda: linear.fit(tfdist_opt.build_dataset((x, y), strategy, N), epochs=4, verbose=0),
    x,
    y,
    4,
)
# Uneven inputs: the dataset function runs once for the chief's copy (its
# length, 10, sets the epoch) and once traced for the workers (TF runs that
# one graph on every worker, each with input_pipeline_id 0): 7 batches. Each
# worker repeats its own input, so none runs out and no step is lost.
uneven_calls = []


def uneven_fn(ctx):
    n = (10, 7)[min(len(uneven_calls), 1)]
    uneven_calls.append(n)
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(N).repeat(n)


exact("uneven_dataset_fn", lambda: linear.fit(uneven_fn, epochs=2, verbose=0), x, y, 20)
out["uneven_lengths"] = uneven_calls

lap("datasets")
# evaluate / predict: the same numbers as ps.evaluate / ps.predict and numpy.
rec3 = Recorder()
out["evaluate"] = linear.evaluate(
    x, y, batch_size=10, return_dict=True, verbose=0, callbacks=[rec3]
)
out["ps_evaluate"] = ps.evaluate(linear, x, y, batch_size=10, return_dict=True)
out["evaluate_numpy"] = float(np.mean(-(2 * y[:, 0] - 1) * (x @ kernel(linear))[:, 0]))
out["evaluate_calls"] = rec3.calls
preds = linear.predict(x[:37], batch_size=8, verbose=0)
out["predict_err"] = float(np.abs(preds - x[:37] @ kernel(linear)).max())
out["predict_equal_ps"] = bool(np.array_equal(preds, ps.predict(linear, x[:37], batch_size=8)))

lap("evaluate")
# Refused before any step, each naming its argument.
refused = {}
it0 = steps_of(linear)
for name, call in (
    (
        "batch_size",
        lambda: linear.fit(
            tf.data.Dataset.from_tensor_slices((x, y)).batch(8), batch_size=8, verbose=0
        ),
    ),
    (
        "validation_split",
        lambda: linear.fit(
            tf.data.Dataset.from_tensor_slices((x, y)).batch(8), validation_split=0.5, verbose=0
        ),
    ),
    (
        "class_weight",
        lambda: linear.fit(x, y, sample_weight=np.ones(N), verbose=0, class_weight=cw),
    ),
    ("evaluate_kwargs", lambda: linear.evaluate(x, y, verbose=0, bogus=1)),
):
    try:
        call()
        refused[name] = "no error"
    except (ValueError, TypeError) as e:
        refused[name] = f"{type(e).__name__}: {e}"
out["refused"] = refused
out["refused_steps"] = steps_of(linear) - it0

lap("refused")
# Adam (slots) on a sharded embedding, with Keras's own ModelCheckpoint and
# BackupAndRestore; a second fit resumes from the backup.
ids = rng.integers(0, 1000, size=(N, 2)).astype("int64")
with strategy.scope():
    emb = keras.Sequential(
        [
            keras.Input((2,), dtype="int64"),
            keras.layers.Embedding(1000, 4),
            keras.layers.Flatten(),
            keras.layers.Dense(1),
        ]
    )
    emb.compile(keras.optimizers.Adam(0.01), "mse")
table = variables_lib.raw(emb.layers[0].embeddings)
out["sharded"] = [list(s.shape) for s in getattr(table, "variables", [])]
d = tempfile.mkdtemp()
backup_dir = os.path.join(d, "backup")
emb.fit(
    ids,
    y,
    batch_size=16,
    epochs=2,
    verbose=0,
    callbacks=[
        # Every epoch (not save_best_only): with async steps epoch 2's loss need
        # not be lower, and then the file would rightly hold epoch 1's weights.
        keras.callbacks.ModelCheckpoint(
            os.path.join(d, "best.keras"), monitor="loss", save_best_only=False
        ),
        keras.callbacks.BackupAndRestore(backup_dir, delete_checkpoint=False),
    ],
)
saved = [emb.layers[0].embeddings.numpy().copy(), steps_of(emb)]
out["checkpoint_files"] = sorted(os.listdir(d))
loaded = keras.models.load_model(os.path.join(d, "best.keras"))
out["loaded_equal"] = bool(np.array_equal(loaded.layers[0].embeddings.numpy(), saved[0]))
# Move away from the backup, then "restart": fit restores it before step 1.
emb.layers[0].embeddings.assign(np.zeros((1000, 4), "float32"))
emb.optimizer.iterations.assign(0)


class Restored(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):  # runs after BackupAndRestore's
        out["restored_equal"] = bool(np.array_equal(emb.layers[0].embeddings.numpy(), saved[0]))


restarted = emb.fit(
    ids,
    y,
    batch_size=16,
    epochs=3,
    verbose=0,
    callbacks=[keras.callbacks.BackupAndRestore(backup_dir, delete_checkpoint=False), Restored()],
)
out["resume"] = {"epochs_run": len(restarted.history["loss"]), "steps": steps_of(emb) - saved[1]}
placed = variables_lib.placement(emb, emb.optimizer)
out["placement_count"] = len(placed)
out["off_ps"] = variables_lib.off_ps(placed)
lap("sharded")
print("RESULT " + json.dumps(out), flush=True)
sys.stdout.flush()
os._exit(0)
