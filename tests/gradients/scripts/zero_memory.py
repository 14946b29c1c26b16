"""Worker script: one fit of an MLP on 2 in-process CPU replicas, its peaks.

Usage: python tests/gradients/scripts/zero_memory.py SHARD(0|1) OUT.json

Runs with TensorFlow's BFC allocator on the CPU (TF_CPU_ALLOCATOR_USE_BFC,
set before TensorFlow starts) so `get_memory_info` reports the peak bytes of
live tensors and variables; writes them, the optimizer-state bytes per
replica and the process's peak RSS (VmHWM) to OUT.json.
"""

import json
import os
import sys

os.environ["TF_CPU_ALLOCATOR_USE_BFC"] = "true"

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402

from tfdist_opt.gradients.zero import sharded_state  # noqa: E402
from tfdist_opt.strategy import opt_strategy  # noqa: E402

WIDTH, IN, BATCH = 4096, 1024, 16


def main(shard, out):
    strategy = opt_strategy(cpu_replicas=2, mode="mirrored", shard_optimizer_state=shard)
    with strategy.scope():
        model = keras.Sequential(
            [keras.Input((IN,))]
            + [keras.layers.Dense(WIDTH, activation="relu") for _ in range(2)]
            + [keras.layers.Dense(IN)]
        )
        model.compile(keras.optimizers.Adam(1e-4), "mse")
        model.optimizer.build(model.trainable_variables)
    x = np.random.default_rng(0).normal(size=(BATCH, IN)).astype("float32")
    before = tf.config.experimental.get_memory_info("CPU:0")["current"]
    tf.config.experimental.reset_memory_stats("CPU:0")
    model.fit(tf.data.Dataset.from_tensors((x, x)).repeat(), steps_per_epoch=3, verbose=0)
    with open("/proc/self/status") as f:
        hwm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
    with open(out, "w") as f:
        json.dump(
            {
                "tf_peak_bytes": tf.config.experimental.get_memory_info("CPU:0")["peak"],
                "tf_before_bytes": before,
                "state_bytes_per_replica": sharded_state.state_bytes_per_replica(model.optimizer),
                "peak_rss_bytes": hwm,
            },
            f,
        )


if __name__ == "__main__":
    main(sys.argv[1] == "1", sys.argv[2])
