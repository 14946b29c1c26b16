r"""Accuracy benchmark: PowerSGD ranks vs uncompressed, same steps, same data.

A learnable task generated here (nothing downloaded): inputs x ~ N(0, I) in
`--dim` dimensions, labels the argmax of a fixed random teacher network
(dim -> 32 tanh -> 10 classes); a held-out set from the same teacher. The
student (dim -> 256 relu -> 256 relu -> 10, SGD with momentum) is trained
on every worker of a cluster, once uncompressed and once per rank in
`--ranks`, each from the same initial weights on the same batches, for
`--steps` updates with PowerSGD from update `--start_step`:

    tfdist-opt launch -n 2 -- python benchmarks/powersgd_accuracy.py \
        --steps=1500 --learning_rate=0.02 --target_loss=1.0 \
        --output_json=benchmarks/results/powersgd_accuracy_2workers.json

Per variant: held-out accuracy and loss, final training loss (mean of the
last 20 steps), steps and seconds until the training loss (moving mean of
20 steps) first reaches `--target_loss`, examples/sec, the bytes one step
sends, and the loss curve (Keras's running mean per step, with seconds).
Wall-clock figures are noise on a shared machine; the accuracy, loss and
step counts are not (the same command gives the same digits).
"""

from __future__ import annotations

import os
import sys
import time

from absl import app
from absl import flags

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import common  # pylint: disable=g-import-not-at-top

_STEPS = flags.DEFINE_integer("steps", 400, "Updates per variant.")
_BATCH = flags.DEFINE_integer("batch_size", 32, "Batch per replica.")
_DIM = flags.DEFINE_integer("dim", 64, "Input dimensions.")
_RANKS = flags.DEFINE_list("ranks", ["1", "2", "4"], "PowerSGD ranks to train.")
_START = flags.DEFINE_integer("start_step", 0, "powersgd_start_step.")
_LR = flags.DEFINE_float("learning_rate", 0.05, "SGD learning rate (momentum 0.9).")
_TARGET = flags.DEFINE_float("target_loss", 0.3, "Training loss to time.")
_SMOOTH = 20


def teacher_data(n, dim, seed):
    import numpy as np

    t = np.random.default_rng(1234)
    w1 = t.normal(size=(dim, 32)) / np.sqrt(dim)
    w2 = t.normal(size=(32, 10)) * 2.0
    x = np.random.default_rng(seed).normal(size=(n, dim)).astype("float32")
    y = np.argmax(np.tanh(x @ w1 * 2.0) @ w2, axis=1).astype("int32")
    return x, y


class _Curve:
    def __init__(self, keras):
        class Callback(keras.callbacks.Callback):
            def __init__(cb):
                super().__init__()
                cb.losses, cb.times = [], []

            def on_train_begin(cb, logs=None):
                cb.start = time.perf_counter()

            def on_train_batch_end(cb, batch, logs=None):
                cb.losses.append(float(logs["loss"]))
                cb.times.append(time.perf_counter() - cb.start)

        self.callback = Callback()


def _to_target(losses, times, target):
    import numpy as np

    # Keras logs the running mean over the epoch; recover per-step losses.
    running = np.asarray(losses)
    steps = np.arange(1, len(running) + 1)
    per_step = running * steps - np.concatenate([[0.0], running[:-1] * steps[:-1]])
    smooth = np.convolve(per_step, np.ones(_SMOOTH) / _SMOOTH, mode="valid")
    hit = np.nonzero(smooth <= target)[0]
    final = float(per_step[-_SMOOTH:].mean())
    if not len(hit):
        return None, None, final
    step = int(hit[0]) + _SMOOTH
    return step, float(times[step - 1]), final


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    import keras
    import tensorflow as tf

    from tfdist_opt.gradients.binding import keras_binding
    from tfdist_opt.gradients.powersgd import lowrank
    from tfdist_opt.gradients.options import GradientOptions
    from tfdist_opt.strategy.build import opt_strategy

    strategy = opt_strategy()
    n = strategy.num_replicas_in_sync
    global_batch = _BATCH.value * n
    x, y = teacher_data(global_batch * _STEPS.value, _DIM.value, seed=0)
    xt, yt = teacher_data(4096, _DIM.value, seed=1)
    opts = tf.data.Options()
    opts.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    train = (
        tf.data.Dataset.from_tensor_slices((x, y))
        .batch(global_batch, drop_remainder=True)
        .with_options(opts)
    )
    test = (
        tf.data.Dataset.from_tensor_slices((xt, yt))
        .batch(global_batch, drop_remainder=True)
        .with_options(opts)
    )
    variants = [("none", GradientOptions())] + [
        (
            f"powersgd_rank{r}",
            GradientOptions(
                compression="powersgd", powersgd_rank=int(r), powersgd_start_step=_START.value
            ),
        )
        for r in _RANKS.value
    ]
    rows = []
    for name, options in variants:
        keras_binding.attach(strategy, options)
        keras.utils.set_random_seed(7)
        with strategy.scope():
            model = keras.Sequential(
                [
                    keras.Input((_DIM.value,)),
                    keras.layers.Dense(256, activation="relu"),
                    keras.layers.Dense(256, activation="relu"),
                    keras.layers.Dense(10),
                ]
            )
            model.compile(
                keras.optimizers.SGD(_LR.value, momentum=0.9),
                keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=["accuracy"],
            )
        curve = _Curve(keras).callback
        started = time.perf_counter()
        model.fit(train, epochs=1, verbose=0, shuffle=False, callbacks=[curve])
        wall = time.perf_counter() - started
        test_loss, test_acc = model.evaluate(test, verbose=0)
        step, seconds, final = _to_target(curve.losses, curve.times, _TARGET.value)
        state = lowrank.state_of(model.optimizer)
        dense = sum(4 * int(tf.size(v)) for v in model.trainable_variables)
        timed = curve.times[-1] - curve.times[9] if len(curve.times) > 10 else wall
        row = {
            "variant": name,
            "steps": _STEPS.value,
            "global_batch": global_batch,
            "test_accuracy": float(test_acc),
            "test_loss": float(test_loss),
            "final_train_loss": final,
            "target_loss": _TARGET.value,
            "steps_to_target": step,
            "seconds_to_target": seconds,
            "examples_per_sec": global_batch * (len(curve.times) - 10) / timed,
            "wall_s": wall,
            "dense_bytes_per_step": dense,
            "sent_bytes_per_step": state.plan.sent_bytes if state else dense,
            "train_loss_running_mean": [round(v, 5) for v in curve.losses],
            "seconds": [round(v, 3) for v in curve.times],
        }
        rows.append(row)
        if common.is_chief():
            print(
                f"{name:18s} acc {test_acc:.4f} loss {test_loss:.4f} "
                f"train {final:.4f} to-target {step} steps / {seconds} s "
                f"{row['examples_per_sec']:.0f} ex/s bytes {row['sent_bytes_per_step']}",
                flush=True,
            )
    by = {r["variant"]: r for r in rows}
    summary = {f"{name}_test_accuracy": r["test_accuracy"] for name, r in by.items()}
    summary.update({f"{name}_steps_to_target": r["steps_to_target"] for name, r in by.items()})
    common.write_report(
        "powersgd_accuracy",
        {
            "steps": _STEPS.value,
            "batch_size": _BATCH.value,
            "dim": _DIM.value,
            "ranks": _RANKS.value,
            "start_step": _START.value,
            "learning_rate": _LR.value,
            "target_loss": _TARGET.value,
            "task": "teacher network (dim-32 tanh-10) argmax labels, generated; "
            "held-out 4096 examples; student dim-256-256-10",
        },
        rows,
        summary,
        output_json=common.OUTPUT_JSON.value,
    )


if __name__ == "__main__":
    app.run(main)
