"""Worker script: sharded vs unsharded optimizer state on one cluster.

Usage: python tests/multiworker/scripts/zero_train.py --out DIR

As a worker (TF_CONFIG set) it builds `opt_strategy(shard_optimizer_state=
True)` and trains Adam ("adam_sharded") and SGD+momentum ("sgd_sharded"),
writing a tf.train.Checkpoint of the sharded Adam run after 2 of 4 steps;
then re-attaches unsharded `GradientOptions` to the same strategy and
trains "adam_plain" and "sgd_plain". Weights go to DIR/<name>_<task>.npz,
the optimizer-state bytes per replica to DIR/bytes_<task>.json. The test
calls `reference(DIR)` in its own process: it restores the chief's
checkpoint into one unsharded replica and trains the last 2 steps
("resumed_ref").
"""

import argparse
import json
import os
import sys

import numpy as np

WORKERS, BATCH, STEPS, IN, HID = 2, 8, 4, 6, 9


def data():
    x = np.random.default_rng(0).normal(size=(BATCH * STEPS, IN)).astype("float32")
    return x, (x[:, :1] - 0.5 * x[:, 1:2]).astype("float32")


def build(strategy, opt):
    import keras

    with strategy.scope():
        model = keras.Sequential(
            [keras.Input((IN,)), keras.layers.Dense(HID, activation="tanh"), keras.layers.Dense(1)]
        )
        rng = np.random.default_rng(1)
        model.set_weights([rng.normal(size=w.shape).astype("float32") for w in model.get_weights()])
        model.compile(
            keras.optimizers.Adam(0.01)
            if opt == "adam"
            else keras.optimizers.SGD(0.1, momentum=0.9),
            "mse",
        )
        model.optimizer.build(model.trainable_variables)
    return model


def fit(model, first, steps):
    import tensorflow as tf

    x, y = data()
    ds = tf.data.Dataset.from_tensor_slices(
        (x[first * BATCH : (first + steps) * BATCH], y[first * BATCH : (first + steps) * BATCH])
    ).batch(BATCH)
    opts = tf.data.Options()
    opts.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    model.fit(ds.with_options(opts), epochs=1, verbose=0, shuffle=False)


def save(model, out, name):
    np.savez(
        os.path.join(out, f"{name}.npz"), **{f"w{i}": w for i, w in enumerate(model.get_weights())}
    )


def reference(out):
    """Resumes the chief's sharded checkpoint in one unsharded, one-device
    process (the test's own: no TF start-up of its own)."""
    import tensorflow as tf
    from tfdist_opt.strategy.build import opt_strategy

    model = build(opt_strategy(mode="one_device"), "adam")
    tf.train.Checkpoint(model=model, optimizer=model.optimizer).read(
        os.path.join(out, "ckpt_0")
    ).assert_consumed()
    fit(model, 2, 2)
    save(model, out, "resumed_ref")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    sys.path.insert(0, os.getcwd())
    import tensorflow as tf
    from tfdist_opt.strategy.build import opt_strategy

    from tfdist_opt.gradients.binding import keras_binding
    from tfdist_opt.gradients.zero import sharded_state
    from tfdist_opt.gradients.options import GradientOptions

    task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    strategy = opt_strategy(shard_optimizer_state=True)
    assert strategy.num_replicas_in_sync == WORKERS
    sizes = {}
    for opt in ("adam", "sgd"):
        model = build(strategy, opt)
        sizes[f"{opt}_sharded"] = sharded_state.state_bytes_per_replica(model.optimizer)
        if opt == "adam":
            fit(model, 0, 2)
            tf.train.Checkpoint(model=model, optimizer=model.optimizer).write(
                os.path.join(args.out, f"ckpt_{task}")
            )
            fit(model, 2, STEPS - 2)
        else:
            fit(model, 0, STEPS)
        save(model, args.out, f"{opt}_sharded_{task}")
    keras_binding.attach(strategy, GradientOptions())
    for opt in ("adam", "sgd"):
        model = build(strategy, opt)
        sizes[f"{opt}_plain"] = sharded_state.state_bytes_per_replica(model.optimizer)
        fit(model, 0, STEPS)
        save(model, args.out, f"{opt}_plain_{task}")
    with open(os.path.join(args.out, f"bytes_{task}.json"), "w") as f:
        json.dump(sizes, f)


if __name__ == "__main__":
    main()
