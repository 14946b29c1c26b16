r"""Parameter servers vs all-reduce on a recommendation model, same run, same data.

    python benchmarks/ps.py --output_json=/tmp/ps.json

The driver (this binary without `--role`) starts two local clusters in turn
with `tfdist-opt launch`, on the same synthetic click data and model:

- `ps`: chief + `--workers` workers + `--ps` ps tasks; the embedding table
  is sharded over the ps tasks; `tfdist_opt.parameter_server.fit`, each
  step one worker's batch of `--batch_size`, workers asynchronous.
- `allreduce`: `--workers` workers under our multi-worker strategy
  (`opt_strategy()`, RING), Keras 3 `model.fit`, each step every worker's
  `--batch_size` (global `workers x batch_size`), synchronous.

Both train on the same number of examples (`--examples_per_epoch` per epoch,
`--epochs` epochs; the first epoch is warm-up and not timed). The model:
`--fields` categorical ids per example into one `Embedding(--rows, --dim)`,
then a small MLP, binary cross-entropy. Labels come from a hidden per-row
weight, so the table must really be learnt.

Bytes moved per step are computed from the model, not sniffed: PS, per
worker step, pull + push of the dense parameters and of the looked-up rows
(`2 x (dense + batch x fields x dim) x 4` bytes); all-reduce, per worker
step, the ring's `2 (n-1)/n` x dense gradient bytes, plus the embedding
gradient, which Keras 3 hands to the collective as IndexedSlices: TF
all-gathers those, `(n-1) x batch x fields x (dim x 4 + 8)` bytes.

Summary keys: `speedup_ps_vs_allreduce` (PS examples/sec / all-reduce
examples/sec), `loss_ratio_ps_vs_allreduce` (held-out loss, PS / all-reduce;
below 1: PS reached a lower loss), `examples_per_sec_ps`,
`examples_per_sec_allreduce`, `bytes_per_step_ps`, `bytes_per_step_allreduce`.
Each run's row also holds its training loss per epoch (`train_loss_epochs`).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags

if __package__ in (None, ""):  # run as `python benchmarks/ps.py`
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import common  # pylint: disable=g-import-not-at-top

_ROLE = flags.DEFINE_enum(
    "role", None, ["ps", "allreduce"], "Internal: which run this process belongs to."
)
_PART_JSON = flags.DEFINE_string("part_json", None, "Internal: the run's result file.")
_WORKERS = flags.DEFINE_integer("workers", 2, "Worker tasks in each run.")
_PS = flags.DEFINE_integer("ps", 2, "Parameter-server tasks in the PS run.")
_ROWS = flags.DEFINE_integer("rows", 1_000_000, "Embedding rows.")
_DIM = flags.DEFINE_integer("dim", 16, "Embedding width.")
_FIELDS = flags.DEFINE_integer("fields", 4, "Categorical ids per example.")
_HIDDEN = flags.DEFINE_integer("hidden", 64, "MLP width.")
_BATCH = flags.DEFINE_integer("batch_size", 256, "Examples per worker step.")
_EXAMPLES = flags.DEFINE_integer("examples_per_epoch", 65536, "Examples per epoch.")
_EPOCHS = flags.DEFINE_integer("epochs", 3, "Epochs (the first is warm-up).")
_LR = flags.DEFINE_float("learning_rate", 0.01, "Adam learning rate (both runs).")
_TIMEOUT = flags.DEFINE_integer("run_timeout_s", 900, "Wall-clock limit per run.")


# ------------------------------------------------------------------ data
def make_data(rows, fields, n, seed=0):
    """Synthetic clicks: ids (n, fields) int64, labels (n, 1) float32."""
    import numpy as np  # pylint: disable=g-import-not-at-top

    rng = np.random.default_rng(seed)
    hidden = rng.normal(size=rows).astype("float32")
    # Popular ids are frequent (Zipf-like), as in real click logs.
    ids = (rng.zipf(1.2, size=(n, fields)) - 1) % rows
    logits = hidden[ids].sum(axis=1, keepdims=True)
    labels = (rng.random((n, 1)) < 1 / (1 + np.exp(-logits))).astype("float32")
    return ids.astype("int64"), labels


def make_model(keras, rows, dim, fields, hidden):
    return keras.Sequential(
        [
            keras.Input((fields,), dtype="int64"),
            keras.layers.Embedding(rows, dim),
            keras.layers.Flatten(),
            keras.layers.Dense(hidden, activation="relu"),
            keras.layers.Dense(1),
        ]
    )


def dense_params(dim, fields, hidden):
    return (fields * dim + 1) * hidden + hidden + 1


def bytes_per_step(role, batch, dim, fields, hidden, workers):
    dense = dense_params(dim, fields, hidden) * 4
    rows = batch * fields
    if role == "ps":
        return 2 * (dense + rows * dim * 4)
    return 2 * (workers - 1) / workers * dense + (workers - 1) * rows * (dim * 4 + 8)


# ------------------------------------------------------------- one run
def run_role(role):
    import tfdist_opt  # pylint: disable=g-import-not-at-top

    strategy = tfdist_opt.opt_strategy()
    import keras  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    from tfdist_opt import parameter_server as ps  # pylint: disable=g-import-not-at-top

    n = _EXAMPLES.value
    ids, labels = make_data(_ROWS.value, _FIELDS.value, n + 8192)
    train_x, train_y = ids[:n], labels[:n]
    test_x, test_y = ids[n:], labels[n:]
    workers = _WORKERS.value
    times = []

    class EpochTimer(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self._start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            times.append(time.perf_counter() - self._start)

    with strategy.scope():
        model = make_model(keras, _ROWS.value, _DIM.value, _FIELDS.value, _HIDDEN.value)
        model.compile(
            keras.optimizers.Adam(_LR.value), keras.losses.BinaryCrossentropy(from_logits=True)
        )
    if role == "ps":
        steps = n // _BATCH.value
        hist = ps.fit(
            model,
            train_x,
            train_y,
            batch_size=_BATCH.value,
            epochs=_EPOCHS.value,
            steps_per_epoch=steps,
            verbose=0,
            callbacks=[EpochTimer()],
        )
        test_loss = ps.evaluate(model, test_x, test_y, batch_size=1024)
        iterations = int(model.optimizer.iterations.numpy())
        examples_per_step = _BATCH.value
    else:
        global_batch = _BATCH.value * workers
        steps = n // global_batch
        ds = (
            tf.data.Dataset.from_tensor_slices((train_x, train_y))
            .shuffle(n, seed=0)
            .repeat()
            .batch(global_batch, drop_remainder=True)
        )
        hist = model.fit(
            ds, epochs=_EPOCHS.value, steps_per_epoch=steps, verbose=0, callbacks=[EpochTimer()]
        )
        test_loss = model.evaluate(
            tf.data.Dataset.from_tensor_slices((test_x, test_y)).batch(1024), verbose=0
        )
        iterations = int(model.optimizer.iterations.numpy())
        examples_per_step = global_batch
    measured = times[1:] or times
    rates = [steps * examples_per_step / t for t in measured]
    row = {
        "setting": role,
        "examples_per_sec": statistics.median(rates),
        "examples_per_sec_epochs": rates,
        "epoch_times_s": times,
        "steps_per_epoch": steps,
        "iterations": iterations,
        "final_train_loss": float(hist.history["loss"][-1]),
        "train_loss_epochs": [float(v) for v in hist.history["loss"]],
        "test_loss": float(test_loss),
        "bytes_per_step": bytes_per_step(
            role, _BATCH.value, _DIM.value, _FIELDS.value, _HIDDEN.value, workers
        ),
        "examples_per_step": examples_per_step,
    }
    if role == "ps":
        table = model.layers[0].embeddings.value
        row["embedding_shards"] = len(getattr(table, "variables", [table]))
    if common.is_chief():
        with open(_PART_JSON.value, "w") as f:
            json.dump(row, f)
    sys.stdout.flush()
    os._exit(0)  # PS servers (and MWMS) cannot be shut down cleanly in-process


# --------------------------------------------------------------- driver
def _launch(role, part):
    passthrough = [
        f"--{f.name}={f.value}"
        for f in (_WORKERS, _PS, _ROWS, _DIM, _FIELDS, _HIDDEN, _BATCH, _EXAMPLES, _EPOCHS, _LR)
    ]
    cmd = [sys.executable, "-m", "tfdist_opt", "launch", "--workers", str(_WORKERS.value)]
    if role == "ps":
        cmd += ["--ps", str(_PS.value)]
    cmd += [
        "--",
        sys.executable,
        os.path.abspath(__file__),
        f"--role={role}",
        f"--part_json={part}",
        *passthrough,
    ]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_CONFIG", None)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = repo + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run(
        cmd, env=env, timeout=_TIMEOUT.value, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0 or not os.path.exists(part):
        raise RuntimeError(
            f"the {role} run failed (exit {proc.returncode}):\n" + proc.stderr[-4000:]
        )
    with open(part) as f:
        return json.load(f)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    if _ROLE.value is not None:
        run_role(_ROLE.value)
        return
    with tempfile.TemporaryDirectory() as tmp:
        rows = [_launch(role, os.path.join(tmp, f"{role}.json")) for role in ("ps", "allreduce")]
    by = {r["setting"]: r for r in rows}
    summary = {
        "speedup_ps_vs_allreduce": by["ps"]["examples_per_sec"]
        / by["allreduce"]["examples_per_sec"],
        "loss_ratio_ps_vs_allreduce": by["ps"]["test_loss"] / by["allreduce"]["test_loss"],
        "examples_per_sec_ps": by["ps"]["examples_per_sec"],
        "examples_per_sec_allreduce": by["allreduce"]["examples_per_sec"],
        "bytes_per_step_ps": by["ps"]["bytes_per_step"],
        "bytes_per_step_allreduce": by["allreduce"]["bytes_per_step"],
    }
    for r in rows:
        print(
            f"{r['setting']:>9}: examples/sec {r['examples_per_sec']:.0f} "
            f"(epochs: {', '.join(f'{x:.0f}' for x in r['examples_per_sec_epochs'])}), "
            f"bytes/step {r['bytes_per_step']:.0f}, test loss {r['test_loss']:.4f}, "
            f"final train loss {r['final_train_loss']:.4f}"
        )
    print(json.dumps(summary, indent=1))
    common.write_report(
        "ps",
        common.flag_config(),
        rows,
        summary,
        output_json=common.OUTPUT_JSON.value,
        csv_path=common.CSV.value,
    )


if __name__ == "__main__":
    app.run(main)
