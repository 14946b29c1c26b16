"""Worker script: trains one small model under several gradient settings.

Usage: python tests/multiworker/scripts/grad_train.py --out DIR

As a worker (TF_CONFIG set) it builds `opt_strategy(grad_accum=4,
bytes_per_pack="auto")` (accumulation wired through configuration, the
pack size autotuned on the real shapes) and trains variant "accum"; then it
re-attaches other `GradientOptions` to the same strategy and trains
"plain" (TF defaults), "pack" (auto packing), "bf16" and "streams"
(streamed pieces of 64 KB, two in flight, `tfdist_opt.gradients.collectives.collectives`). The test calls
`reference(DIR)` in its own process for the single-process references
"big" (one step at the accumulated batch) and "plain". Weights and the optimizer's iteration
count go to DIR/<variant>_<task>.npz.
"""

import argparse
import json
import os
import sys

import numpy as np

MICRO, K, WORKERS, STEPS = 4, 4, 2, 3
IN, HID = 32, 384  # ~0.75 MB of gradients: several "auto" packs


def data():
    rng = np.random.default_rng(0)
    n = MICRO * K * WORKERS * STEPS
    x = rng.normal(size=(n, IN)).astype("float32")
    y = (x[:, :1] - 0.5 * x[:, 1:2]).astype("float32")
    return x, y


def init_weights():
    rng = np.random.default_rng(1)
    return [
        rng.normal(size=(IN, HID)).astype("float32") * 0.05,
        np.zeros(HID, "float32"),
        rng.normal(size=(HID, HID)).astype("float32") * 0.03,
        np.zeros(HID, "float32"),
        rng.normal(size=(HID, 1)).astype("float32") * 0.03,
        np.zeros(1, "float32"),
    ]


def train(strategy, global_batch, out, name, task):
    import keras
    import tensorflow as tf

    x, y = data()
    with strategy.scope():
        model = keras.Sequential(
            [
                keras.Input((IN,)),
                keras.layers.Dense(HID, activation="tanh"),
                keras.layers.Dense(HID, activation="tanh"),
                keras.layers.Dense(1),
            ]
        )
        model.set_weights(init_weights())
        model.compile(keras.optimizers.SGD(0.05), "mse")
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch, drop_remainder=True)
    opts = tf.data.Options()
    opts.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    ds = ds.with_options(opts)
    model.fit(ds, epochs=1, verbose=0, shuffle=False)
    arrays = {f"w{i}": w for i, w in enumerate(model.get_weights())}
    arrays["iterations"] = np.array(int(model.optimizer.iterations.numpy()))
    np.savez(os.path.join(out, f"{name}_{task}.npz"), **arrays)


def reference(out):
    """The single-process references (run in the test's own process)."""
    from tfdist_opt.strategy.build import opt_strategy

    strategy = opt_strategy(mode="one_device")
    train(strategy, MICRO * K * WORKERS, out, "big", "ref")
    train(strategy, MICRO * WORKERS, out, "plain", "ref")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    sys.path.insert(0, os.getcwd())
    from tfdist_opt.strategy.build import opt_strategy

    from tfdist_opt.gradients.binding import keras_binding
    from tfdist_opt.gradients.options import GradientOptions

    task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    strategy = opt_strategy(grad_accum=K, bytes_per_pack="auto")
    assert strategy.num_replicas_in_sync == WORKERS
    train(strategy, MICRO * WORKERS, args.out, "accum", task)
    tuned = list(keras_binding.binding_of(strategy).tuned.values())
    for name, options in (
        ("plain", GradientOptions()),
        ("pack", GradientOptions(bytes_per_pack="auto")),
        ("bf16", GradientOptions(compression="bf16")),
        (
            "streams",
            GradientOptions(hooked=True, collective_streams=2, collective_piece_bytes=64 << 10),
        ),
    ):
        keras_binding.attach(strategy, options)
        train(strategy, MICRO * WORKERS, args.out, name, task)
    print(f"TUNED_BYTES_PER_PACK={tuned[0] if tuned else None}", flush=True)
    from tensorflow.python.eager import context  # the server's config, read back

    chunk = context.context().config.experimental.recv_buf_max_chunk
    print(f"RECV_BUF_MAX_CHUNK={chunk}", flush=True)


if __name__ == "__main__":
    main()
