r"""Recomputed activations (Keras's `RematScope`) in `fit`: step memory and compute.

    python benchmarks/remat.py --output_json=benchmarks/results/remat_2replicas.json
    python benchmarks/remat.py --cpu_replicas=0 --output_json=remat_1device.json

One process, two models with the same initial weights under the same
strategy (`opt_strategy(cpu_replicas=N, mode="mirrored")`, or one device
with `--cpu_replicas=0`): `--blocks` residual blocks
(`x + Dense(width)(Dense(expansion * width, relu)(x))`, each block one
Keras layer), then `Dense(1)`, Adam, MSE. `plain` builds the blocks as
they are; `remat` builds them inside
`keras.RematScope(mode="list_of_layers", layer_names=[the blocks])`, so
each block's forward is recomputed in its backward and only the block's
input is kept between the two passes. The two are trained in alternating
rounds of `--steps` steps on the same batch (round 0 is warm-up: tracing).

Memory is TensorFlow's own allocator statistics on the CPU
(`TF_CPU_ALLOCATOR_USE_BFC=true`, set by this binary before TensorFlow
starts; `tf.config.experimental.get_memory_info("CPU:0")`, whose one BFC
allocator serves every virtual CPU device): per step, the peak bytes in
use minus the bytes in use at the step's start (weights, optimizer state
and anything kept between steps are below the line; activations, their
gradients, the weights' gradients and the all-reduce's buffers are
above it). Where TensorFlow was imported before this binary could set the
variable, the process's peak RSS above its start is reported instead
(`memory_source` says which).

Summary keys: `step_peak_ratio` (remat / plain median step peak; goal
<= 0.5), `step_peak_bytes_plain`, `step_peak_bytes_remat`,
`compute_ratio` (remat / plain median step time, alternating rounds),
`cpu_ratio` (the same for the process's CPU seconds per step: the extra
compute, less sensitive than wall time to a busy host),
`weights_max_rel_diff` (after the same steps; goal <= 1e-6),
`weights_bit_equal`, `memory_source`.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

from absl import app
from absl import flags

if __package__ in (None, ""):  # run as `python benchmarks/remat.py`
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import common  # pylint: disable=g-import-not-at-top

_REPLICAS = flags.DEFINE_integer(
    "cpu_replicas", 2, "Virtual CPU replicas (MirroredStrategy); 0: one device."
)
_BLOCKS = flags.DEFINE_integer("blocks", 24, "Residual blocks.")
_WIDTH = flags.DEFINE_integer("width", 128, "Block input and output width.")
_EXPANSION = flags.DEFINE_integer("expansion", 4, "Hidden width / width inside a block.")
_BATCH = flags.DEFINE_integer("batch_size", 2048, "Examples per replica step.")
_STEPS = flags.DEFINE_integer("steps", 3, "Steps per setting and round.")
_ROUNDS = flags.DEFINE_integer("rounds", 3, "Measured rounds (plus one warm-up round).")
_REMAT = flags.DEFINE_bool(
    "remat", True, "Build the second model in a RematScope (False: two plain models)."
)


def _memory_probe():
    """(source, bytes_in_use(), reset(), peak()) of TF's CPU allocator, else RSS."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    try:
        tf.config.experimental.get_memory_info("CPU:0")
    except ValueError:

        def rss():
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

        def reset():
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")

        def hwm():
            with open("/proc/self/status") as f:
                return next(int(x.split()[1]) * 1024 for x in f if x.startswith("VmHWM:"))

        return "rss", rss, reset, hwm

    def current():
        return tf.config.experimental.get_memory_info("CPU:0")["current"]

    def reset():
        tf.config.experimental.reset_memory_stats("CPU:0")

    def peak():
        return tf.config.experimental.get_memory_info("CPU:0")["peak"]

    return "tf_bfc_allocator", current, reset, peak


def build_model(remat: bool, blocks: int, width: int, expansion: int):
    """The residual MLP; with `remat`, every block recomputed in its backward."""
    import keras  # pylint: disable=g-import-not-at-top

    class ResidualBlock(keras.layers.Layer):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.hidden = keras.layers.Dense(expansion * width, activation="relu")
            self.out = keras.layers.Dense(width)

        def call(self, x):
            return x + self.out(self.hidden(x))

    names = [f"block_{i}" for i in range(blocks)]
    x = inputs = keras.Input((width,))
    for name in names:
        if remat:
            with keras.RematScope(mode="list_of_layers", layer_names=names):
                x = ResidualBlock(name=name)(x)
        else:
            x = ResidualBlock(name=name)(x)
    return keras.Model(inputs, keras.layers.Dense(1)(x))


def run():
    """Trains both settings in alternating rounds; returns (rows, summary)."""
    import keras  # pylint: disable=g-import-not-at-top
    import numpy as np  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    from tfdist_opt.strategy import opt_strategy  # pylint: disable=g-import-not-at-top

    if _REPLICAS.value > 0:
        strategy = opt_strategy(cpu_replicas=_REPLICAS.value, mode="mirrored")
    else:
        strategy = opt_strategy(mode="one_device")
    n = strategy.num_replicas_in_sync
    source, current, reset, peak = _memory_probe()
    settings = ("plain", "remat")
    models = {}
    with strategy.scope():
        for s in settings:
            keras.utils.set_random_seed(0)
            models[s] = build_model(
                s == "remat" and _REMAT.value, _BLOCKS.value, _WIDTH.value, _EXPANSION.value
            )
            models[s].compile(keras.optimizers.Adam(1e-3), "mse")
    models["remat"].set_weights(models["plain"].get_weights())
    rng = np.random.default_rng(0)
    x = rng.normal(size=(_BATCH.value * n, _WIDTH.value)).astype("float32")
    y = rng.normal(size=(_BATCH.value * n, 1)).astype("float32")
    data = tf.data.Dataset.from_tensors((x, y)).repeat()
    samples = {s: {"step_peak_bytes": [], "step_time_s": [], "step_cpu_s": []} for s in settings}

    class Probe(keras.callbacks.Callback):
        def __init__(self, into):
            super().__init__()
            self._into = into

        def on_train_batch_begin(self, batch, logs=None):
            reset()
            self._start = current()
            self._t0 = time.perf_counter()
            self._cpu0 = time.process_time()

        def on_train_batch_end(self, batch, logs=None):
            self._into["step_time_s"].append(time.perf_counter() - self._t0)
            self._into["step_cpu_s"].append(time.process_time() - self._cpu0)
            self._into["step_peak_bytes"].append(peak() - self._start)

    for r in range(_ROUNDS.value + 1):
        for s in settings:
            into = samples[s] if r else {"step_peak_bytes": [], "step_time_s": [], "step_cpu_s": []}
            models[s].fit(data, steps_per_epoch=_STEPS.value, verbose=0, callbacks=[Probe(into)])
    weights = {s: np.concatenate([np.ravel(w) for w in models[s].get_weights()]) for s in settings}
    scale = np.maximum(np.abs(weights["plain"]), 1e-12)
    rel = float(np.max(np.abs(weights["remat"] - weights["plain"]) / scale))
    rows = [
        {
            "setting": s,
            "replicas": n,
            "params": models[s].count_params(),
            "memory_source": source,
            "step_peak_bytes_median": statistics.median(samples[s]["step_peak_bytes"]),
            "step_peak_bytes_max": max(samples[s]["step_peak_bytes"]),
            "step_time_s_median": statistics.median(samples[s]["step_time_s"]),
            "step_cpu_s_median": statistics.median(samples[s]["step_cpu_s"]),
            **samples[s],
        }
        for s in settings
    ]
    plain, remat = rows
    summary = {
        "memory_source": source,
        "replicas": n,
        "step_peak_bytes_plain": plain["step_peak_bytes_median"],
        "step_peak_bytes_remat": remat["step_peak_bytes_median"],
        "step_peak_ratio": remat["step_peak_bytes_median"] / plain["step_peak_bytes_median"],
        "step_peak_ratio_worst": remat["step_peak_bytes_max"] / min(plain["step_peak_bytes"]),
        "compute_ratio": remat["step_time_s_median"] / plain["step_time_s_median"],
        "cpu_ratio": remat["step_cpu_s_median"] / plain["step_cpu_s_median"],
        "weights_max_rel_diff": rel,
        "weights_bit_equal": bool(np.array_equal(weights["plain"], weights["remat"])),
        "load_1min_end": os.getloadavg()[0],
    }
    return rows, summary


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    # TF's CPU allocator keeps statistics only as BFC; read when TF starts.
    if "tensorflow" not in sys.modules:
        os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")
    rows, summary = run()
    common.write_report(
        "remat",
        common.flag_config(),
        rows,
        summary,
        output_json=common.OUTPUT_JSON.value,
        csv_path=common.CSV.value,
    )
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    app.run(main)
