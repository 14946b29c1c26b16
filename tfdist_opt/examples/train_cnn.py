"""The main job: a small CNN trained with Keras 3 `fit` under `opt_strategy()`.

Runs unchanged as one process or as every worker of a cluster:

    tfdist-opt launch -n 2 -- python -m tfdist_opt.examples.train_cnn

Data: a deterministic synthetic 10-class image set (28x28x1, class-dependent
blobs plus noise), generated in memory so nothing is downloaded, fed
through `tfdist_opt.build_dataset` (each worker reads its own rows; every
worker runs the same number of steps). `ThroughputMonitor` reports
examples/sec. Only the chief prints Keras progress. With `--log_dir DIR`
the chief also writes TensorBoard logs there (Keras's scalars through
`ChiefTensorBoard`, `throughput/*` and `comm/*` from our callbacks); view
them with `tensorboard --logdir DIR` (`pip install "tfdist_opt[tensorboard]"`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys

import numpy as np

import tfdist_opt


def synthetic_images(n: int, seed: int = 0, classes: int = 10):
    """n images whose class is a bright 7x7 patch at a class-specific place."""
    rng = np.random.RandomState(seed)
    y = rng.randint(0, classes, size=(n,)).astype("int32")
    x = rng.normal(0.0, 0.3, size=(n, 28, 28, 1)).astype("float32")
    for c in range(classes):
        r, col = divmod(c, 4)
        x[y == c, 2 + 7 * r : 9 + 7 * r, 1 + 7 * col : 8 + 7 * col, 0] += 1.0
    return x, y


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--global_batch", type=int, default=64)
    parser.add_argument("--examples", type=int, default=4096)
    parser.add_argument("--config", default=None, help="config file or preset")
    parser.add_argument("--result_json", default=None, help="chief writes final metrics here")
    parser.add_argument(
        "--weights_npz",
        default=None,
        help="chief saves the final weights here (numpy .npz), to compare runs",
    )
    parser.add_argument("--log_dir", default=None, help="TensorBoard logs (chief only)")
    args = parser.parse_args(argv)

    strategy = tfdist_opt.opt_strategy(args.config)  # before any other TF op
    import keras

    from tfdist_opt import callbacks as cbs

    topo = tfdist_opt.detect_topology()
    replicas = strategy.num_replicas_in_sync

    x, y = synthetic_images(args.examples)
    # Sharded per worker, per-replica batches, seeded reshuffle, prefetch;
    # the global batch must divide by the replicas (checked before step 1).
    train = tfdist_opt.build_dataset(
        (x, y), strategy, args.global_batch, options=tfdist_opt.PipelineOptions(seed=0)
    )
    monitor = tfdist_opt.ThroughputMonitor(args.global_batch, verbose=0, log_dir=args.log_dir)
    callbacks = [monitor]
    if args.log_dir:
        callbacks += [
            cbs.CommunicationProfiler(log_dir=args.log_dir, verbose=0),
            cbs.ChiefTensorBoard(args.log_dir),
        ]

    with strategy.scope():
        keras.utils.set_random_seed(0)
        model = keras.Sequential(
            [
                keras.Input((28, 28, 1)),
                keras.layers.Conv2D(16, 3, activation="relu"),
                keras.layers.MaxPooling2D(),
                keras.layers.Conv2D(32, 3, activation="relu"),
                keras.layers.GlobalAveragePooling2D(),
                keras.layers.Dense(10),
            ]
        )
        model.compile(
            optimizer=keras.optimizers.SGD(0.05 * replicas, momentum=0.9),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
    history = model.fit(
        train,
        epochs=args.epochs,
        shuffle=False,
        callbacks=cbs.ordered(callbacks),
        verbose=2 if topo.is_chief else 0,
    )
    digest = hashlib.sha256(b"".join(w.tobytes() for w in model.get_weights())).hexdigest()[:16]
    result = {
        "task": f"{topo.task_type or 'single'}:{topo.task_index or 0}",
        "replicas": replicas,
        "loss": [round(v, 4) for v in history.history["loss"]],
        "accuracy": [round(v, 4) for v in history.history["accuracy"]],
        "weights_sha256": digest,
        "throughput": monitor.summary(),
    }
    # Every worker prints its line so a person can see the weights agree.
    print("RESULT " + json.dumps(result), flush=True)
    if topo.is_chief and args.weights_npz:
        np.savez(args.weights_npz, *model.get_weights())
    if topo.is_chief and args.result_json:
        with open(args.result_json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
