"""A tiny Keras training job for `tfdist-opt launch` tests.

Builds `tfdist_opt.opt_strategy()` first (before any other TF op), then
fits a Dense model in `strategy.scope()` on a fixed dataset and writes
`{out}/worker-{i}.json` with the replica count, the attempt number and the
final weights. `--batch-sleep S` slows each batch (on attempts below
`--slow-attempts`, which run `--slow-epochs`) so a test can kill a worker
mid-training; `{out}/worker-{i}.pid` and `{out}/training-{i}-{attempt}`
mark when that is possible.
"""

import argparse
import json
import os
import time


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--batch-sleep", type=float, default=0.0)
    parser.add_argument(
        "--slow-attempts",
        type=int,
        default=None,
        help="attempts below this sleep per batch and run "
        "--slow-epochs; later ones run --epochs at speed",
    )
    parser.add_argument("--slow-epochs", type=int, default=100)
    args = parser.parse_args()

    index = int(os.environ.get("TFDIST_LAUNCH_WORKER_INDEX", "0"))
    attempt = int(os.environ.get("TFDIST_LAUNCH_RESTART_COUNT", "0"))
    slow = args.batch_sleep > 0 and (args.slow_attempts is None or attempt < args.slow_attempts)
    epochs = args.slow_epochs if slow and args.slow_attempts else args.epochs
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"worker-{index}.pid"), "w") as f:
        f.write(str(os.getpid()))

    import tfdist_opt  # pylint: disable=g-import-not-at-top

    strategy = tfdist_opt.opt_strategy()  # first: collectives / devices

    import keras  # pylint: disable=g-import-not-at-top
    import numpy as np  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    global_batch = 8
    n = global_batch * args.steps
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 4)).astype("float32")
    y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], "float32")).astype("float32")
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    ds = ds.with_options(options)

    class Marker(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 0:
                open(os.path.join(args.out, f"training-{index}-{attempt}"), "w").close()
            if slow:
                time.sleep(args.batch_sleep)

    keras.utils.set_random_seed(1)
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    history = model.fit(ds, epochs=epochs, verbose=0, shuffle=False, callbacks=[Marker()])
    weights = [w.tolist() for w in model.get_weights()]
    print(
        f"replicas={strategy.num_replicas_in_sync} attempt={attempt} "
        f"loss={history.history['loss'][-1]:.6f}",
        flush=True,
    )
    with open(os.path.join(args.out, f"worker-{index}.json"), "w") as f:
        json.dump(
            {
                "replicas": strategy.num_replicas_in_sync,
                "attempt": attempt,
                "weights": weights,
                "loss": history.history["loss"],
            },
            f,
        )


if __name__ == "__main__":
    main()
