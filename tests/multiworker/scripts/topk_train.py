"""Worker script: the user-written TopK stage (docs/examples/topk_stage.py) on 2 workers.

Usage: python tests/multiworker/scripts/topk_train.py --out DIR

Each worker builds `opt_strategy(gradient_stages=[TopK(1.0)])` and trains:
* "full" (k = 100%) and "plain" (no stage, hooked all-reduce): 4 steps;
* "whole": TopK(0.25), 6 steps uninterrupted;
* "first": TopK(0.25), 3 steps, then a tf.train.Checkpoint and a .keras file;
  "resumed" (a fresh model + optimizer restored from the checkpoint) and
  "keras" (the .keras file loaded), each trained 3 more steps; each records
  whether this worker's own residuals came back exactly.
Arrays go to DIR/<variant>_<task>.npz.
"""

import argparse
import importlib.util
import json
import os
import sys

import numpy as np

B, STEPS = 32, 4


def data(n):
    rng = np.random.default_rng(0)
    return rng.normal(size=(n, 6)).astype("float32"), rng.normal(size=(n, 3)).astype("float32")


def dataset(x, y, skip=0):
    import tensorflow as tf

    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(B, drop_remainder=True).skip(skip)
    opts = tf.data.Options()
    opts.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return ds.with_options(opts)


def model_for(strategy):
    import keras

    keras.utils.set_random_seed(1)
    with strategy.scope():
        model = keras.Sequential(
            [keras.Input((6,)), keras.layers.Dense(8, activation="tanh"), keras.layers.Dense(3)]
        )
        model.compile(keras.optimizers.SGD(0.1, momentum=0.5), "mse")
        model.optimizer.build(model.trainable_variables)
    return model


def weights(model):
    return {f"w{i}": w for i, w in enumerate(model.get_weights())}


def local_residuals(strategy, model):
    """This worker's replica's own residuals (not their sum)."""
    return [
        strategy.experimental_local_results(v.value)[0].numpy()
        for v in model.optimizer.variables
        if "topk_residual" in v.path
    ]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    sys.path.insert(0, os.getcwd())
    spec = importlib.util.spec_from_file_location(
        "topk_stage", os.path.join(os.getcwd(), "docs", "examples", "topk_stage.py")
    )
    topk_stage = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(topk_stage)
    import keras
    import tensorflow as tf

    from tfdist_opt.gradients.binding import keras_binding
    from tfdist_opt.gradients.options import GradientOptions
    from tfdist_opt.strategy.build import opt_strategy

    task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    strategy = opt_strategy(gradient_stages=[topk_stage.TopK(1.0)])
    assert strategy.num_replicas_in_sync == 2
    x, y = data(B * 6)

    def save(name, **arrays):
        np.savez(os.path.join(args.out, f"{name}_{task}.npz"), **arrays)

    full = model_for(strategy)
    full.fit(dataset(x[: B * STEPS], y[: B * STEPS]), epochs=1, verbose=0, shuffle=False)
    save("full", **weights(full))
    keras_binding.attach(strategy, GradientOptions(hooked=True))
    plain = model_for(strategy)
    plain.fit(dataset(x[: B * STEPS], y[: B * STEPS]), epochs=1, verbose=0, shuffle=False)
    save("plain", **weights(plain))

    keras_binding.attach(strategy, GradientOptions(hooked=True, stages=[topk_stage.TopK(0.25)]))
    whole = model_for(strategy)
    whole.fit(dataset(x, y), epochs=1, verbose=0, shuffle=False)
    save("whole", **weights(whole))
    first = model_for(strategy)
    first.fit(dataset(x[: B * 3], y[: B * 3]), epochs=1, verbose=0, shuffle=False)
    saved = local_residuals(strategy, first)
    path = tf.train.Checkpoint(model=first, optimizer=first.optimizer).write(
        os.path.join(args.out, f"ckpt_{task}", "ckpt")
    )
    keras_path = os.path.join(args.out, "m.keras")  # one writer (chief_saving)
    first.save(keras_path)
    for variant in ("resumed", "keras"):
        if variant == "resumed":
            model = model_for(strategy)
            tf.train.Checkpoint(model=model, optimizer=model.optimizer).read(
                path
            ).assert_existing_objects_matched()
        else:
            with strategy.scope():
                model = keras.models.load_model(keras_path)
        back = local_residuals(strategy, model)
        model.fit(dataset(x, y, skip=3), epochs=1, verbose=0, shuffle=False)
        save(
            variant,
            count=len(back),
            res_equal=len(back) == len(saved) and all(map(np.array_equal, back, saved)),
            res_nonzero=all(np.abs(r).max() > 0 for r in saved),
            iterations=int(model.optimizer.iterations.numpy()),
            **weights(model),
        )
    print("TOPK_DONE", flush=True)


if __name__ == "__main__":
    main()
