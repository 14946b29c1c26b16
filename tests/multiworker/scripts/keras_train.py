"""Trains a small CNN with `opt_strategy()` and saves what it saw.

Run as one process (reference) or as each worker of a cluster (TF_CONFIG set
by the test harness). Writes `<out>/<role>.npz` with the final weights,
history, evaluate and predict results, and the replica count; the chief also
saves the model and reloads it.

Flags: --out DIR [--dict] [--steps_per_epoch N] [--legacy] [--plain]
(--legacy: tf_keras; the caller must also set TF_USE_LEGACY_KERAS=1).
`--run DIR[,dict][,steps=N]` (repeatable) instead of --out/--dict/
--steps_per_epoch trains each such model in turn under the one strategy
(one process / one cluster for several runs).
"""

import argparse
import json
import os

import numpy as np

import tfdist_opt

GLOBAL_BATCH = 16
N = 64


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out")
    parser.add_argument("--run", action="append", default=[])
    parser.add_argument("--dict", action="store_true")
    parser.add_argument("--steps_per_epoch", type=int, default=None)
    parser.add_argument("--legacy", action="store_true")
    parser.add_argument(
        "--plain", action="store_true", help="plain tf.distribute MWMS instead of opt_strategy()"
    )
    args = parser.parse_args()

    if args.plain:
        import tensorflow as tf

        impl = tf.distribute.experimental.CommunicationImplementation.RING
        strategy = tf.distribute.MultiWorkerMirroredStrategy(
            communication_options=tf.distribute.experimental.CommunicationOptions(
                implementation=impl
            )
        )
    else:
        # Before any other TF op. This script saves on the chief only
        # (`if topo.is_chief: model.save(...)`): docs/guides/multi-worker.md, "Still different"
        # gives storage_sharing="shared" as the fix (no probe to wait for).
        strategy = tfdist_opt.opt_strategy(storage_sharing="shared")
    runs = [(args.out, args.dict, args.steps_per_epoch)] if args.out else []
    for spec in args.run:
        out, *opts = spec.split(",")
        steps = [int(o[len("steps=") :]) for o in opts if o.startswith("steps=")]
        runs.append((out, "dict" in opts, steps[0] if steps else None))
    for out, use_dict, steps_per_epoch in runs:
        train(strategy, out, use_dict, steps_per_epoch, args.legacy)


def train(strategy, out, use_dict, steps_per_epoch, legacy):
    import tensorflow as tf

    if legacy:
        import tf_keras as keras
    else:
        import keras

    topo = tfdist_opt.detect_topology()
    role = "single" if topo.tf_config is None else f"worker{topo.task_index}"

    rng = np.random.RandomState(0)
    x = rng.rand(N, 8, 8, 1).astype("float32")
    y = rng.randint(0, 3, size=(N,)).astype("int32")
    if use_dict:
        ds = tf.data.Dataset.from_tensor_slices(({"image": x}, y))
    else:
        ds = tf.data.Dataset.from_tensor_slices((x, y))
    ds = ds.batch(GLOBAL_BATCH)
    if steps_per_epoch:
        ds = ds.repeat()
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    ds = ds.with_options(options)
    x_only = (
        tf.data.Dataset.from_tensor_slices({"image": x} if use_dict else x)
        .batch(GLOBAL_BATCH)
        .with_options(options)
    )

    with strategy.scope():
        tf.random.set_seed(1)
        np.random.seed(1)
        inputs = keras.Input((8, 8, 1), name="image")
        h = keras.layers.Conv2D(
            4, 3, activation="relu", kernel_initializer=keras.initializers.GlorotUniform(seed=1)
        )(inputs)
        h = keras.layers.Flatten()(h)
        outputs = keras.layers.Dense(
            3, kernel_initializer=keras.initializers.GlorotUniform(seed=2)
        )(h)
        model = keras.Model({"image": inputs} if use_dict else inputs, outputs)
        model.compile(
            optimizer=keras.optimizers.SGD(0.1, momentum=0.9),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
    history = model.fit(
        ds,
        epochs=3,
        steps_per_epoch=steps_per_epoch,
        validation_data=ds,
        validation_steps=steps_per_epoch,
        verbose=0,
    )
    evaluation = model.evaluate(ds, steps=steps_per_epoch, verbose=0, return_dict=True)
    predictions = model.predict(x_only, verbose=0)

    os.makedirs(out, exist_ok=True)
    result = {f"w{i}": w for i, w in enumerate(model.get_weights())}
    if topo.is_chief:
        ext = ".h5" if legacy else ".keras"
        path = os.path.join(out, "model" + ext)
        model.save(path)
        reloaded = keras.models.load_model(path)
        result["reloaded_predictions"] = reloaded.predict(x_only, verbose=0)
    np.savez(
        os.path.join(out, role + ".npz"),
        predictions=predictions,
        loss=np.array(history.history["loss"]),
        val_loss=np.array(history.history["val_loss"]),
        val_accuracy=np.array(history.history["val_accuracy"]),
        eval_loss=np.array(evaluation["loss"]),
        eval_accuracy=np.array(evaluation["accuracy"]),
        replicas=np.array(strategy.num_replicas_in_sync),
        # What cpu_split did to this process (checked by the test).
        cpus=np.array(sorted(os.sched_getaffinity(0))),
        intra_op=np.array(tf.config.threading.get_intra_op_parallelism_threads()),
        inter_op=np.array(tf.config.threading.get_inter_op_parallelism_threads()),
        **result,
    )
    print(
        json.dumps(
            {
                "role": role,
                "replicas": strategy.num_replicas_in_sync,
                "loss": history.history["loss"],
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
