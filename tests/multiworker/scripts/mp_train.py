"""Worker script: a 2-stage pipeline trained on 2 workers x 2 virtual CPUs.

Usage: python tests/multiworker/scripts/mp_train.py --out DIR [--reference]

As a worker (TF_CONFIG set) each process runs the pipeline over its own
2 virtual CPUs on its half of every global batch, with gradients averaged
across workers (`cross_worker="auto"`). With --reference (no TF_CONFIG) one
process trains the same pipeline on the whole global batches. Worker 1
starts from different weights to show the chief's are broadcast. Weights
go to DIR/<task>.npz with the variable devices and the update count.
"""

import argparse
import json
import os
import sys

import numpy as np

IN, HID, GLOBAL, WORKERS, STEPS, MICRO = 8, 32, 16, 2, 4, 2


def data():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(GLOBAL * STEPS, IN)).astype("float32")
    return x, (x[:, :1] - 0.5 * x[:, 1:2]).astype("float32")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--reference", action="store_true")
    args = ap.parse_args()
    sys.path.insert(0, os.getcwd())
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras

    from tfdist_opt import model_parallel

    task = "ref" if args.reference else json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    keras.utils.set_random_seed(1 if task == 1 else 0)  # worker 1 differs
    model = model_parallel.pipeline(
        [
            [keras.layers.Dense(HID, activation="tanh")],
            [keras.layers.Dense(HID, activation="tanh"), keras.layers.Dense(1)],
        ],
        devices=["/cpu:0", "/cpu:1"],
        micro_batches=MICRO,
        input_shape=(IN,),
    )
    assert model.cross_worker == (not args.reference)
    model.compile(keras.optimizers.Adam(0.01), "mse")
    x, y = data()
    if not args.reference:  # this worker's half of every global batch
        half = GLOBAL // WORKERS
        idx = np.concatenate(
            [
                np.arange(s * GLOBAL + task * half, s * GLOBAL + (task + 1) * half)
                for s in range(STEPS)
            ]
        )
        x, y, batch = x[idx], y[idx], half
    else:
        batch = GLOBAL
    model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0)
    arrays = {f"w{i}": w for i, w in enumerate(model.get_weights())}
    arrays["iterations"] = np.array(int(model.optimizer.iterations.numpy()))
    np.savez(os.path.join(args.out, f"{task}.npz"), **arrays)
    print("DEVICES=" + json.dumps([v.value.device for v in model.trainable_variables]), flush=True)


if __name__ == "__main__":
    main()
