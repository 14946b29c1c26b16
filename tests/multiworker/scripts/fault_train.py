"""A 2-worker Keras fit that can be made to fail on purpose.

Flags: --steps N (total steps, one epoch), --die_task I --die_at_step K
(task I calls os._exit(1) at step K, like a crashed host), --steps_log PATH
(append each finished step), --soak (print, at the end, RSS and the
process's thread count from /proc/self/status, sampled every 10 steps:
TF's own threads included, which `threading` cannot see),
--mark_step K (print "task I: reached step K" after step K),
--sleep_task I --sleep_at_step K --sleep_s S (task I sleeps S seconds after
step K, like a peer stuck outside the collectives).
"""

import argparse
import json
import os
import sys
import time

import numpy as np

import tfdist_opt


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--die_task", type=int, default=-1)
    parser.add_argument("--die_at_step", type=int, default=-1)
    parser.add_argument("--soak", action="store_true")
    parser.add_argument("--mark_step", type=int, default=-1)
    parser.add_argument("--sleep_task", type=int, default=-1)
    parser.add_argument("--sleep_at_step", type=int, default=-1)
    parser.add_argument("--sleep_s", type=float, default=0.0)
    args = parser.parse_args()

    strategy = tfdist_opt.opt_strategy()
    import keras
    import tensorflow as tf

    topo = tfdist_opt.detect_topology()
    me = topo.task_index or 0
    rng = np.random.RandomState(0)
    x = rng.rand(256, 8).astype("float32")
    y = rng.rand(256, 1).astype("float32")
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(16).repeat().with_options(options)
    with strategy.scope():
        model = keras.Sequential(
            [keras.Input((8,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]
        )
        model.compile("sgd", "mse")

    samples = []

    class Faults(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if me == args.die_task and batch + 1 == args.die_at_step:
                print(f"task {me}: dying at step {batch + 1}", flush=True)
                os._exit(1)
            if me == args.sleep_task and batch + 1 == args.sleep_at_step:
                print(f"task {me}: sleeping {args.sleep_s:g} s at step {batch + 1}", flush=True)
                time.sleep(args.sleep_s)
            if batch + 1 == args.mark_step:
                print(f"task {me}: reached step {batch + 1}", flush=True)
            if args.soak and batch % 10 == 0:
                samples.append((batch, *_status()))

    t0 = time.time()
    model.fit(ds, epochs=1, steps_per_epoch=args.steps, verbose=0, callbacks=[Faults()])
    result = {
        "task": me,
        "steps": int(model.optimizer.iterations.numpy()),
        "seconds": round(time.time() - t0, 2),
    }
    if args.soak:
        samples.append((args.steps, *_status()))
        result["samples"] = samples
    print("RESULT " + json.dumps(result), flush=True)


def _status():
    """(VmRSS in MB, Threads) of this process, from /proc/self/status."""
    fields = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value.split()
    return int(fields["VmRSS"][0]) / 1024.0, int(fields["Threads"][0])


if __name__ == "__main__":
    sys.exit(main())
