"""One script for every task: 2 workers train, the `evaluator` task evaluates.

The pattern of docs/guides/evaluation.md: `opt_strategy()` first on every task, the model built
and compiled in its scope, then the evaluator runs `SidecarEvaluator` on the
ModelCheckpoint files while the workers `fit`. The evaluator writes
`{out}/evaluator.json` (every evaluation: checkpoint name, step, metrics);
the chief writes `{out}/final.json` (`model.evaluate` of the final weights
on the same data) and `{out}/epoch1.json` (the same metrics of the weights
after epoch 1, what the first checkpoint holds, computed in numpy).
"""

import argparse
import json
import os


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args()

    import tfdist_opt  # pylint: disable=g-import-not-at-top

    strategy = tfdist_opt.opt_strategy()  # first, on every task

    import keras  # pylint: disable=g-import-not-at-top
    import numpy as np  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype("float32")
    y = (x[:, 0] > 0).astype("int64") + (x[:, 1] > 0).astype("int64")
    val = tf.data.Dataset.from_tensor_slices((x[:32], y[:32])).batch(8)
    ckpt_dir = os.path.join(args.out, "ckpt")

    with strategy.scope():
        keras.utils.set_random_seed(1)
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
        model.compile(
            keras.optimizers.SGD(0.5), "sparse_categorical_crossentropy", metrics=["accuracy"]
        )

    if tfdist_opt.task_type() == "evaluator":
        evaluator = tfdist_opt.SidecarEvaluator(
            model,
            val,
            ckpt_dir,
            log_dir=os.path.join(args.out, "eval_logs"),
            poll_interval=0.2,
            settle_s=0.5,
            end_grace_s=1.0,
            verbose=0,
        )
        evaluator.start()
        (events,) = tf.io.gfile.glob(os.path.join(args.out, "eval_logs", "*"))
        tags = sorted(
            {
                (v.tag, e.step)
                for e in map(
                    tf.compat.v1.Event.FromString,
                    tf.data.TFRecordDataset(events).as_numpy_iterator(),
                )
                for v in e.summary.value
            }
        )
        with open(os.path.join(args.out, "evaluator.json"), "w") as f:
            json.dump(
                {
                    "evaluations": [
                        {"name": e.checkpoint.name, "step": e.checkpoint.step, "metrics": e.metrics}
                        for e in evaluator.outcome.evaluations
                    ],
                    "scalars": tags,
                },
                f,
            )
        return

    checkpoint = keras.callbacks.ModelCheckpoint(
        os.path.join(ckpt_dir, "weights.{epoch:02d}.weights.h5"), save_weights_only=True
    )
    after_epoch_1 = []
    record = keras.callbacks.LambdaCallback(
        on_epoch_end=lambda epoch, logs: epoch or after_epoch_1.append(model.get_weights())
    )
    if tfdist_opt.task_type() == "chief":  # parameter servers: the coordinator
        from tfdist_opt import parameter_server as ps  # pylint: disable=g-import-not-at-top

        ps.fit(
            model,
            x,
            y,
            batch_size=16,
            epochs=args.epochs,
            verbose=0,
            callbacks=[checkpoint, record],
        )
        final = ps.evaluate(model, x[:32], y[:32], batch_size=8, return_dict=True)
    else:
        train = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
        model.fit(train, epochs=args.epochs, verbose=0, callbacks=[checkpoint, record])
        final = model.evaluate(val, verbose=0, return_dict=True)  # every worker
    if os.environ.get("TFDIST_LAUNCH_WORKER_INDEX", "0") == "0":
        with open(os.path.join(args.out, "final.json"), "w") as f:
            json.dump({k: float(v) for k, v in final.items()}, f)
        with open(os.path.join(args.out, "epoch1.json"), "w") as f:
            json.dump(_numpy_metrics(after_epoch_1[0], x[:32], y[:32]), f)


def _numpy_metrics(weights, x, y):
    """`evaluate` of the softmax layer `weights` on (x, y), in float64 numpy."""
    import numpy as np  # pylint: disable=g-import-not-at-top

    logits = x.astype("float64") @ weights[0] + weights[1]
    logits -= logits.max(axis=1, keepdims=True)
    log_p = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    return {
        "loss": float(-log_p[np.arange(len(y)), y].mean()),
        "accuracy": float((log_p.argmax(axis=1) == y).mean()),
    }


if __name__ == "__main__":
    main()
