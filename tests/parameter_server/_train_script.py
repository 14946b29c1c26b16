"""In-process PS cluster (2 workers, 2 ps) scenarios; one JSON line each.

argv: the scenarios to run ("linear", "sharded"), one after another on one
cluster (each with its own strategy); prints `RESULT <scenario> {json}`.

Run by tests/parameter_server/test_training.py in a subprocess: a PS
strategy reconnects TF's eager context to the cluster, which must not leak
into the rest of the test session.
"""

import json
import os
import sys
import tempfile
import traceback

import numpy as np
import keras
import tensorflow as tf

import tfdist_opt

from tfdist_opt import parameter_server as ps
from tfdist_opt.parameter_server import backup as backup_lib
from tfdist_opt.parameter_server import variables as variables_lib


def linear(strategy, out):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(512, 4)).astype("float32")
    w = np.array([[1.0], [-2.0], [3.0], [0.5]], "float32")
    y = x @ w + 0.25
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(keras.optimizers.Adam(0.05), "mse", metrics=["mae"])
    try:
        keras.Model.fit(model, x, y, epochs=1, verbose=0)  # Keras's own, unrouted
        out["keras_fit"] = "no error"
    except Exception as e:  # pylint: disable=broad-except
        out["keras_fit"] = f"{type(e).__name__}: {e}"
    hist = ps.fit(
        model, x, y, batch_size=8, epochs=4, verbose=0, seed=1, validation_data=(x[:64], y[:64])
    )
    out["history"] = hist.history
    out["iterations"] = int(model.optimizer.iterations.numpy())
    out["expected_iterations"] = 4 * 64
    out["off_ps"] = variables_lib.off_ps(variables_lib.placement(model, model.optimizer))
    out["num_placed"] = len(variables_lib.placement(model, model.optimizer))
    out["evaluate"] = ps.evaluate(model, x, y, batch_size=100, return_dict=True)
    kernel, bias = (v.numpy() for v in model.weights)
    preds = ps.predict(model, x[:37], batch_size=10)
    out["predict_err"] = float(np.abs(preds - (x[:37] @ kernel + bias)).max())
    out["eval_loss_numpy"] = float(np.mean((x @ kernel + bias - y) ** 2))

    # Callbacks: EarlyStopping stops; ModelCheckpoint writes; backup resumes.
    d = tempfile.mkdtemp()
    stop = keras.callbacks.EarlyStopping(monitor="loss", patience=0, min_delta=1e9)
    h2 = ps.fit(model, x, y, batch_size=8, epochs=5, verbose=0, callbacks=[stop])
    out["early_stop_epochs"] = len(h2.history["loss"])
    path = os.path.join(d, "w.weights.h5")
    before = [w.tolist() for w in model.get_weights()]
    ps.fit(
        model,
        x,
        y + 1.0,
        batch_size=64,
        epochs=1,
        verbose=0,  # moves the bias
        callbacks=[keras.callbacks.ModelCheckpoint(path, save_weights_only=True)],
    )
    out["checkpoint_written"] = os.path.exists(path)
    plain = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])  # no strategy
    plain.load_weights(path)
    out["checkpoint"] = {
        "before": before,
        "after": [w.tolist() for w in model.get_weights()],
        "loaded": [w.tolist() for w in plain.get_weights()],
    }
    monitor = tfdist_opt.ThroughputMonitor(global_batch_size=8, warmup_steps=4, verbose=0)
    h4 = ps.fit(model, x, y, batch_size=8, epochs=2, verbose=0, callbacks=[monitor])
    out["monitor"] = monitor.summary()
    out["epoch_examples_per_sec"] = h4.history["examples_per_sec"]
    bdir = os.path.join(d, "backup")
    ps.fit(model, x, y, batch_size=64, epochs=2, verbose=0, callbacks=[ps.BackupAndRestore(bdir)])
    it_after_2 = int(model.optimizer.iterations.numpy())
    backup = ps.BackupAndRestore(bdir)
    h3 = ps.fit(model, x, y, batch_size=64, epochs=3, verbose=0, callbacks=[backup])
    out["resumed_from_epoch"] = backup.restored_epoch
    out["resumed_epochs_run"] = len(h3.history["loss"])
    out["resume_iterations"] = [it_after_2, int(model.optimizer.iterations.numpy())]


def sharded(strategy, out):
    rows, dim = 1_000_000, 4
    rng = np.random.default_rng(0)
    ids = rng.integers(0, rows, size=(1024, 2)).astype("int64")
    y = (ids[:, :1] % 2).astype("float32")
    with strategy.scope():
        model = keras.Sequential(
            [
                keras.Input((2,), dtype="int64"),
                keras.layers.Embedding(rows, dim),
                keras.layers.Flatten(),
                keras.layers.Dense(1),
            ]
        )
        model.compile(keras.optimizers.Adam(0.01), "mse")
    table = variables_lib.raw(model.layers[0].embeddings)
    out["sharded"] = isinstance(table, variables_lib.ShardedVariable)
    out["shard_shapes"] = [list(s.shape) for s in table.variables]
    before = [s.numpy().copy() for s in table.variables]
    hist = ps.fit(model, ids, y, batch_size=64, epochs=2, verbose=0)
    out["loss"] = hist.history["loss"]
    after = [s.numpy() for s in table.variables]
    changed = [set(np.nonzero(np.abs(a - b).sum(1))[0].tolist()) for a, b in zip(after, before)]
    touched = set(np.unique(ids).tolist())
    half = rows // 2
    out["changed_per_shard"] = [len(c) for c in changed]
    out["changed_outside_batch"] = len((changed[0] | {i + half for i in changed[1]}) - touched)
    placed = variables_lib.placement(model, model.optimizer)
    out["placement"] = {k: v for k, v in placed.items() if "embed" in k}
    out["off_ps"] = variables_lib.off_ps(placed)
    out["iterations"] = int(model.optimizer.iterations.numpy())
    d = tempfile.mkdtemp()
    ckpt = backup_lib.variables_checkpoint(model, model.optimizer)
    path = ckpt.save(os.path.join(d, "ckpt"))
    saved = [s.numpy().copy() for s in table.variables] + [int(model.optimizer.iterations.numpy())]
    ps.fit(model, ids, y, batch_size=64, epochs=1, verbose=0)
    ckpt.restore(path).assert_consumed()
    out["restored_equal"] = all(
        np.array_equal(a, s.numpy()) for a, s in zip(saved, table.variables)
    )
    out["restored_iterations"] = [saved[-1], int(model.optimizer.iterations.numpy())]


if __name__ == "__main__":
    os.environ.pop("TF_CONFIG", None)
    cluster = ps.InProcessCluster(num_workers=2, num_ps=2)
    for scenario in sys.argv[1:]:  # one cluster, a strategy per scenario
        result = {}
        try:
            if scenario == "linear":
                linear(cluster.strategy(), result)
            else:
                sharded(cluster.strategy(min_shard_bytes=1 << 20, max_shards=2), result)
        except Exception:  # pylint: disable=broad-except
            result = {"error": traceback.format_exc()}  # fails this scenario's tests only
        print(f"RESULT {scenario} " + json.dumps(result), flush=True)
    sys.stdout.flush()
    os._exit(0)  # in-process servers cannot be shut down
