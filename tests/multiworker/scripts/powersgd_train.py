"""Worker script: PowerSGD on a real 2-worker cluster (one launch, four variants).

Usage: python tests/multiworker/scripts/powersgd_train.py --out DIR

Each worker builds `opt_strategy(compression="powersgd", ...)` and trains:
* "plain" (uncompressed, re-attached GradientOptions()) and "full" (rank 8 >=
  min(n, m) of every matrix, C=0, start step 2): conv + dense, 4 steps;
* "linear" (rank 1, start step 1, a loss linear in the weights): the applied
  update, the residual (error buffers summed over replicas) per worker;
* "resume": rank 1, 6 steps uninterrupted vs 3 steps, then a fresh model +
  optimizer restored from a tf.train.Checkpoint ("resumed") and a model
  loaded from a .keras file ("keras"), each trained 3 more steps; each
  records whether this worker's residual and the Q's came back exactly.
Arrays go to DIR/<variant>_<task>.npz.
"""

import argparse
import json
import os
import sys

import numpy as np

XS, OUT, B, STEPS = (4, 4, 2), 3, 32, 4
IN_LIN, OUT_LIN, LR = 12, 8, 0.1


def data(n, seed=0):
    rng = np.random.default_rng(seed)
    return (
        rng.normal(size=(n, *XS)).astype("float32"),
        rng.normal(size=(n, OUT)).astype("float32"),
    )


def linear_data(steps):
    rng = np.random.default_rng(3)
    return (
        rng.normal(size=(B * steps, IN_LIN)).astype("float32"),
        rng.normal(size=(B * steps, OUT_LIN)).astype("float32"),
    )


def dataset(x, y, skip=0):
    import tensorflow as tf

    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(B, drop_remainder=True).skip(skip)
    opts = tf.data.Options()
    opts.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return ds.with_options(opts)


def conv_model(strategy):
    import keras

    keras.utils.set_random_seed(1)
    with strategy.scope():
        model = keras.Sequential(
            [
                keras.Input(XS),
                keras.layers.Conv2D(4, 3, activation="tanh"),
                keras.layers.Flatten(),
                keras.layers.Dense(OUT),
            ]
        )
        model.compile(keras.optimizers.SGD(0.1, momentum=0.5), "mse")
        model.optimizer.build(model.trainable_variables)
    return model


def save(out, name, task, **arrays):
    np.savez(os.path.join(out, f"{name}_{task}.npz"), **arrays)


def weights(model):
    return {f"w{i}": w for i, w in enumerate(model.get_weights())}


def local_residuals(strategy, model):
    """This worker's replica's own error buffers (not their sum)."""
    from tfdist_opt.gradients.powersgd import lowrank

    return [
        strategy.experimental_local_results(e.value)[0].numpy()
        for e in lowrank.state_of(model.optimizer).error_buffers
    ]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    sys.path.insert(0, os.getcwd())
    import keras
    import tensorflow as tf

    from tfdist_opt.gradients.binding import keras_binding
    from tfdist_opt.gradients.powersgd import lowrank
    from tfdist_opt.gradients.options import GradientOptions
    from tfdist_opt.strategy.build import opt_strategy

    task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    strategy = opt_strategy(
        compression="powersgd", powersgd_rank=8, powersgd_start_step=2, powersgd_min_compression=0
    )
    assert strategy.num_replicas_in_sync == 2
    x, y = data(B * 6)

    full = conv_model(strategy)
    full.fit(dataset(x[: B * STEPS], y[: B * STEPS]), epochs=1, verbose=0, shuffle=False)
    save(args.out, "full", task, **weights(full))

    def attach(**kw):
        keras_binding.attach(
            strategy, GradientOptions(compression="powersgd", powersgd_min_compression=0, **kw)
        )

    keras_binding.attach(strategy, GradientOptions())
    plain = conv_model(strategy)
    plain.fit(dataset(x[: B * STEPS], y[: B * STEPS]), epochs=1, verbose=0, shuffle=False)
    save(args.out, "plain", task, **weights(plain))

    attach(powersgd_rank=1, powersgd_start_step=1)
    xl, yl = linear_data(5)
    with strategy.scope():
        lin = keras.Sequential(
            [keras.Input((IN_LIN,)), keras.layers.Dense(OUT_LIN, use_bias=False)]
        )
        lin.compile(keras.optimizers.SGD(LR), lambda t, p: keras.ops.mean(t * p, axis=-1))
    w0 = lin.get_weights()[0]
    lin.fit(dataset(xl, yl), epochs=1, verbose=0, shuffle=False)
    (entry,) = lowrank.state_of(lin.optimizer).entries.values()
    save(
        args.out,
        "linear",
        task,
        applied=(w0 - lin.get_weights()[0]) / LR,
        residual=entry.error.numpy(),
    )

    attach(powersgd_rank=1, powersgd_start_step=1)
    whole = conv_model(strategy)
    whole.fit(dataset(x, y), epochs=1, verbose=0, shuffle=False)
    save(args.out, "whole", task, **weights(whole))
    first = conv_model(strategy)
    first.fit(dataset(x[: B * 3], y[: B * 3]), epochs=1, verbose=0, shuffle=False)
    saved_q = [q.numpy() for q in lowrank.state_of(first.optimizer).q_factors]
    saved_err = local_residuals(strategy, first)
    path = tf.train.Checkpoint(model=first, optimizer=first.optimizer).write(
        os.path.join(args.out, f"ckpt_{task}", "ckpt")
    )
    keras_path = os.path.join(args.out, "m.keras")  # one writer (chief_saving)
    first.save(keras_path)
    for variant in ("resumed", "keras"):
        if variant == "resumed":
            model = conv_model(strategy)
            tf.train.Checkpoint(model=model, optimizer=model.optimizer).read(
                path
            ).assert_existing_objects_matched()
        else:
            with strategy.scope():
                model = keras.models.load_model(keras_path)
        restored = lowrank.state_of(model.optimizer)
        q_equal = all(np.array_equal(q.numpy(), s) for q, s in zip(restored.q_factors, saved_q))
        err_equal = all(
            np.array_equal(a, b) for a, b in zip(local_residuals(strategy, model), saved_err)
        )
        model.fit(dataset(x, y, skip=3), epochs=1, verbose=0, shuffle=False)
        save(
            args.out,
            variant,
            task,
            q_equal=q_equal,
            err_equal=err_equal,
            err_nonzero=all(np.abs(e).max() > 0 for e in saved_err),
            iterations=int(model.optimizer.iterations.numpy()),
            **weights(model),
        )
    print("POWERSGD_DONE", flush=True)


if __name__ == "__main__":
    main()
