"""Worker script for tests/multiworker/test_stalls.py: stalls that recover, uneven inputs.

Run as 2 workers (harness.run_workers) with TFDIST_OPT_STALL_WARN_S set.

Part 1 (`fit` of 30 steps, global batch 8): worker 1 stalls three times,
each in another place, and the chief's inspector must name it each time:
  - batch 6 of its `tf.data` input waits (a `numpy_function` in `map`);
  - after step 14 its `on_train_batch_end` waits;
  - after step 22 its `on_train_batch_end` waits for a lock another thread
    holds.
Each stall lasts until the chief has named it (no race with the clock on a
loaded host): the chief copies its stall messages to STALL_DIR/named.log,
and the stalled code polls that file for the message naming it, for at
most STALL_CAP_S seconds. Worker 1 prints `STALL <kind> <wall time>` when a
stall starts and `STALLED <kind> <seconds>` when it ends.

Part 2: one 2-epoch `fit` per input kind, worker 1 holding 3 fewer batches
than worker 0 (10 vs 7 per epoch): the user's `tf.data` (known and unknown
cardinality; and known with the stall inspector off), a dataset function
(`distribute_datasets_from_function`), a generator, a `keras.utils.PyDataset`
and `tfdist_opt.build_dataset`.
Prints `UNEVEN <json>` per kind: the steps each epoch ran and seconds.
"""

import json
import os
import re
import sys
import threading
import time

import tfdist_opt

strategy = tfdist_opt.opt_strategy(all_reduce="ring")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from tfdist_opt import runtime  # noqa: E402

INDEX = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
STALL_DIR = os.environ["STALL_DIR"]
STALL_CAP_S = float(os.environ.get("STALL_CAP_S", "120"))
NAMED_LOG = os.path.join(STALL_DIR, "named.log")
PREFIX = "tfdist_opt: stall: "
LOCK = threading.Lock()
BATCH = 8


class _CopyStallMessages:
    """The chief's stderr: also appends each stall message to NAMED_LOG."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text):
        if PREFIX in text:
            with open(NAMED_LOG, "a") as f:
                f.write(text if text.endswith("\n") else text + "\n")
        return self._stream.write(text)

    def __getattr__(self, name):
        return getattr(self._stream, name)


if INDEX == 0:
    sys.stderr = _CopyStallMessages(sys.stderr)


def stall_until_named(kind, pattern):
    """Blocks until the chief has printed a stall message matching `pattern`."""
    print(f"STALL {kind} {time.time()!r}", flush=True)
    start = time.monotonic()
    wanted = re.compile(PREFIX + "worker 1 has been at " + pattern)
    while time.monotonic() - start < STALL_CAP_S:
        if os.path.exists(NAMED_LOG):
            with open(NAMED_LOG) as f:
                if any(wanted.match(line) for line in f):
                    break
        time.sleep(0.2)
    print(f"STALLED {kind} {time.monotonic() - start:.1f}", flush=True)


def model_in_scope():
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(keras.optimizers.SGD(0.01), "mse")
    return model


def arrays(n):
    rng = np.random.RandomState(INDEX)
    x = rng.rand(n, 4).astype("float32")
    return x, x.sum(axis=1, keepdims=True)


# ------------------------------------------------------------ part 1
def slow_input(ds):
    produced = [0]

    def maybe_sleep(x):
        produced[0] += 1
        if INDEX == 1 and produced[0] == 6:
            stall_until_named("input", r"(?:step \d+|the start of fit) \(input\)")
        return x

    def fn(x, y):
        x2 = tf.numpy_function(maybe_sleep, [x], tf.float32)
        x2.set_shape(x.shape)
        return x2, y

    return ds.map(fn)


class Stalls(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.step = 0

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        if INDEX != 1:
            return
        if self.step == 14:
            stall_until_named("callback", r"step 14 \(callbacks\)")
        elif self.step == 22:
            held = threading.Event()

            def holder():
                with LOCK:
                    held.set()
                    stall_until_named("lock", r"step 22 \(callbacks\)")

            threading.Thread(target=holder, name="lock-holder", daemon=True).start()
            held.wait()
            with LOCK:  # blocks until the holder lets go
                pass


def part1():
    x, y = arrays(30 * BATCH)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    ds = slow_input(tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)).with_options(options)
    t0 = time.time()
    model_in_scope().fit(ds, epochs=1, verbose=0, callbacks=[Stalls()])
    print(f"PART1 done in {time.time() - t0:.1f} s", flush=True)


# ------------------------------------------------------------ part 2
class Counter(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.steps = []

    def on_epoch_begin(self, epoch, logs=None):
        self.steps.append(0)

    def on_train_batch_end(self, batch, logs=None):
        self.steps[-1] += 1


def uneven_inputs():
    """kind -> (fit's x, fit kwargs); worker 1 has 3 fewer batches (7 vs 10)."""
    n = (10 if INDEX == 0 else 7) * BATCH
    x, y = arrays(n)
    off = tf.data.Options()
    off.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF

    def tf_data():
        return tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH).with_options(off)

    def generator():
        for i in range(0, n, BATCH):
            yield x[i : i + BATCH], y[i : i + BATCH]

    class Batches(keras.utils.PyDataset):
        def __len__(self):
            return n // BATCH

        def __getitem__(self, i):
            return x[i * BATCH : (i + 1) * BATCH], y[i * BATCH : (i + 1) * BATCH]

    def dataset_fn(ctx):
        return tf.data.Dataset.from_tensor_slices((x, y)).batch(
            ctx.get_per_replica_batch_size(BATCH * 2)
        )

    per_worker = tf.data.Options()
    per_worker.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    yield "tf.data", lambda: (tf_data(), {})
    yield "tf.data, inspector off", lambda: (tf_data(), {})
    yield "tf.data unknown cardinality", lambda: (tf_data().filter(lambda a, b: True), {})
    yield "dataset function", lambda: (strategy.distribute_datasets_from_function(dataset_fn), {})
    yield "generator", lambda: (generator(), {})
    yield "PyDataset", lambda: (Batches(), {})
    yield (
        "build_dataset",
        lambda: (
            tfdist_opt.build_dataset(
                lambda ctx: tf.data.Dataset.from_tensor_slices((x, y)), strategy, BATCH * 2
            ),
            {},
        ),
    )


def part2():
    for kind, make in uneven_inputs():
        data, kwargs = make()
        counter = Counter()
        model = model_in_scope()
        stall = runtime.runtime_of(strategy).stall
        warn_s = stall.warn_s
        if "inspector off" in kind:  # as with stall_warn_s=0
            stall.warn_s = None
        t0 = time.time()
        try:
            model.fit(data, epochs=2, verbose=0, callbacks=[counter], **kwargs)
            error = None
        except Exception as e:  # noqa: BLE001  (reported, the test decides)
            error = f"{type(e).__name__}: {str(e)[:300]}"
        stall.warn_s = warn_s
        print(
            "UNEVEN "
            + json.dumps(
                {
                    "kind": kind,
                    "steps": counter.steps,
                    "error": error,
                    "weights": [w.tolist() for w in model.get_weights()],
                    "seconds": round(time.time() - t0, 2),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    parts = sys.argv[1:] or ["1", "2"]
    if "1" in parts:
        part1()
    if "2" in parts:
        part2()
    print("ALL DONE", flush=True)
