"""Worker script: trains a tiny model with every tfdist_opt callback.

Usage: python cb_train.py OUT_DIR BACKUP_DIR
Env: CB_KILL_AT_STEP=N makes every worker `os._exit(9)` right after
optimizer step N completes (a hard kill: no callback cleanup runs). The
workers meet at a file barrier in OUT_DIR first: a RING all-reduce can
complete on one worker while its peer is still pulling the last chunk
from it, so a worker that exits at once can make its peer's step N fail
("a peer became unreachable") instead of both dying after step N.
CB_BSF=1: after training, the same workers run scripts/cb_bsf.py's
BatchSizeFinder cases (one cluster start for both).
Writes OUT_DIR/<task>.json (weights, lr trace, history, summaries).
"""

import glob
import json
import os
import sys
import time

import tfdist_opt  # noqa: E402

strategy = tfdist_opt.opt_strategy(all_reduce="ring")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tfdist_opt import callbacks as cbs  # noqa: E402
from tfdist_opt.callbacks import _common  # noqa: E402

GLOBAL_BATCH = 8
BASE_BATCH = 4
BASE_LR = 0.02
EPOCHS = 3
WARMUP = 16


class Recorder(keras.callbacks.Callback):
    """Records the rate used by each update, and kills on request."""

    def __init__(self, kill_at, out_dir):
        super().__init__()
        self.kill_at = kill_at
        self.out_dir = out_dir
        self.lrs = {}

    def on_train_batch_begin(self, batch, logs=None):
        if getattr(self.model, "_tfdist_opt_skipping", False):
            return
        step = int(self.model.optimizer.iterations.numpy())
        self.lrs[step] = float(self.model.optimizer.learning_rate.numpy())

    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        if self.kill_at and step == self.kill_at:
            _barrier(self.out_dir, f"killed_at_{step}", timeout_s=60)
            sys.stdout.flush()
            os._exit(9)


def _barrier(out_dir, name, timeout_s):
    """Waits until every worker has written OUT_DIR/<name>.<task>."""
    open(os.path.join(out_dir, f"{name}.{_common.task_tag()}"), "w").close()
    want = strategy.num_replicas_in_sync  # one CPU replica per worker here
    deadline = time.monotonic() + timeout_s
    while len(glob.glob(os.path.join(out_dir, f"{name}.*"))) < want:
        if time.monotonic() > deadline:
            raise TimeoutError(f"barrier {name}: peers did not arrive in {timeout_s} s")
        time.sleep(0.05)


def main(out_dir, backup_dir):
    keras.utils.set_random_seed(1)
    rng = np.random.RandomState(0)
    x = rng.rand(64, 4).astype("float32")
    y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], "float32")).astype("float32")
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)
    with strategy.scope():
        model = keras.Sequential(
            [keras.Input((4,)), keras.layers.Dense(8, "tanh"), keras.layers.Dense(1)]
        )
        model.compile(keras.optimizers.SGD(BASE_LR, momentum=0.9), "mse")
    kill_at = int(os.environ.get("CB_KILL_AT_STEP", "0"))
    tag = _common.task_tag()
    monitor = cbs.ThroughputMonitor(
        GLOBAL_BATCH,
        window=4,
        warmup_steps=1,
        log_dir=os.path.join(out_dir, "tb"),
        summary_freq=2,
        json_path=os.path.join(out_dir, "throughput.json"),
    )
    profiler = cbs.CommunicationProfiler(
        probe_steps=5, trace_path=os.path.join(out_dir, "trace.json")
    )
    scaled = cbs.ScaledLearningRate(
        BASE_LR, BASE_BATCH, GLOBAL_BATCH, warmup_steps=WARMUP, momentum_correction=True
    )
    backup = cbs.DistributedBackupAndRestore(backup_dir, save_freq=2)
    recorder = Recorder(kill_at, out_dir)
    history = model.fit(
        ds,
        epochs=EPOCHS,
        verbose=0,
        callbacks=cbs.ordered([recorder, monitor, profiler, scaled, backup]),
    )
    result = {
        "task": tag,
        "chief": _common.is_chief(),
        "weights": [w.tolist() for w in model.get_weights()],
        "lrs": recorder.lrs,
        "history": history.history,
        "restored": backup.restored,
        "throughput": monitor.summary(),
        "comm_fraction": profiler.comm_fraction,
        "scaled_lr": scaled.scaled_lr,
    }
    with open(os.path.join(out_dir, f"{tag}.json"), "w") as f:
        json.dump(result, f)
    print(f"DONE {tag}", flush=True)
    if os.environ.get("CB_BSF") == "1":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import cb_bsf  # pylint: disable=g-import-not-at-top

        cb_bsf.find_both(strategy)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
