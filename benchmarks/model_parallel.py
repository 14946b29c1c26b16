r"""Model-parallel (pipeline) benchmark: stage balance and speed vs one device.

Builds an MLP of `--layers` Dense layers of width `--width`, splits it by
parameter bytes into `--stages` stages with `tfdist_opt.model_parallel`
(on the visible GPUs, or on that many virtual CPUs made here when there
are none) and reports:

- per device: parameter + Adam slot bytes (and, on GPUs, peak memory from
  `tf.config.experimental.get_memory_info`);
- examples/sec of `train_on_batch` for the pipeline with each of
  `--micro_batches` (default 1,2,4,8) and for the same model on one device
  (plain Keras), in the same run, measured alternately `--repeats` times.

Summary: `stages` (n), `largest_stage_fraction` (largest device's bytes over
the model's; the goal is <= 1/n + 0.1), `largest_stage_goal`,
`one_device_eps`, and per M `pipeline_m{M}_eps` and `speedup_m{M}`
(pipeline / one device). Virtual CPUs share the host's cores, so on a CPU
host the pipeline cannot be faster: the CPU run shows balance and overhead;
the speed question needs GPUs.

Example:
    python benchmarks/model_parallel.py --output_json=/tmp/mp.json
"""

from __future__ import annotations

import os
import statistics
import sys
import time

from absl import app
from absl import flags
from absl import logging

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import common  # noqa: E402  pylint: disable=g-import-not-at-top

_STAGES = flags.DEFINE_integer("stages", 2, "Pipeline stages (devices).")
_LAYERS = flags.DEFINE_integer("layers", 8, "Dense layers in the MLP.")
_WIDTH = flags.DEFINE_integer("width", 512, "Units per Dense layer.")
_BATCH = flags.DEFINE_integer("batch_size", 64, "Examples per step.")
_MICRO = flags.DEFINE_list("micro_batches", ["1", "2", "4", "8"], "Micro-batch counts to measure.")
_STEPS = flags.DEFINE_integer("steps", 20, "Timed steps per measurement.")
_WARMUP = flags.DEFINE_integer("warmup_steps", 3, "Untimed steps first.")
_REPEATS = flags.DEFINE_integer("repeats", 2, "Alternating measurement rounds.")


def _setup_devices(stages: int) -> tuple[list[str], str]:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        if len(gpus) < stages:
            raise app.UsageError(
                f"Invalid value for `--stages`: expected at most the {len(gpus)} "
                f"visible GPU(s). Received: --stages={stages}"
            )
        return [f"/GPU:{i}" for i in range(stages)], "GPU"
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * max(stages, 1)
    )
    return [f"/CPU:{i}" for i in range(stages)], "CPU"


def _layers(num_layers: int, width: int):
    import keras  # pylint: disable=g-import-not-at-top

    return [
        keras.layers.Dense(
            width if i < num_layers - 1 else 1, activation="relu" if i < num_layers - 1 else None
        )
        for i in range(num_layers)
    ]


def _bytes_per_device(model, devices):
    from tfdist_opt.model_parallel.model import same_device  # pylint: disable=g-import-not-at-top

    def nbytes(v):
        return int(v.numpy().nbytes)

    rows = []
    for d in devices:
        params = sum(nbytes(v) for v in model.weights if same_device(v.value.device, d))
        slots = sum(
            nbytes(v)
            for v in model.optimizer.variables
            if same_device(v.value.device, d) and v.path.endswith(("_momentum", "_velocity"))
        )
        rows.append(
            {
                "setting": f"bytes {d}",
                "device": d,
                "param_bytes": params,
                "slot_bytes": slots,
                "bytes": params + slots,
            }
        )
    return rows


def _peak_memory(devices, kind):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    if kind != "GPU":
        return {}
    return {d: tf.config.experimental.get_memory_info(d.lstrip("/"))["peak"] for d in devices}


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    started = time.perf_counter()
    micro = [int(m) for m in _MICRO.value]
    devices, kind = _setup_devices(_STAGES.value)  # before any other TF op
    import keras  # pylint: disable=g-import-not-at-top
    import numpy as np  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    from tfdist_opt import model_parallel  # pylint: disable=g-import-not-at-top

    width, batch = _WIDTH.value, _BATCH.value
    rng = np.random.default_rng(0)
    x = rng.normal(size=(batch, width)).astype("float32")
    y = rng.normal(size=(batch, 1)).astype("float32")
    keras.utils.set_random_seed(0)
    with tf.device(devices[0]):
        single = keras.Sequential([keras.Input((width,)), *_layers(_LAYERS.value, width)])
    single.compile(keras.optimizers.Adam(1e-4), "mse", jit_compile=False)
    models = {"one_device": single}
    for m in micro:
        pipe = model_parallel.pipeline(
            single, devices=devices, micro_batches=m, cross_worker=False, name=f"pipeline_m{m}"
        )
        pipe.compile(keras.optimizers.Adam(1e-4), "mse")
        models[f"pipeline_m{m}"] = pipe
    rows = _bytes_per_device(models[f"pipeline_m{micro[0]}"], devices)
    total = sum(r["bytes"] for r in rows)
    fraction = max(r["bytes"] for r in rows) / total
    for r in rows:
        print(
            f"{r['device']}: {r['param_bytes']} parameter + {r['slot_bytes']} "
            f"slot bytes ({100 * r['bytes'] / total:.1f}%)",
            flush=True,
        )
    rates = {name: [] for name in models}
    for repeat in range(_REPEATS.value):
        for name, model in models.items():
            times = common.time_steps(
                lambda model=model: model.train_on_batch(x, y),
                steps=_STEPS.value,
                warmup=_WARMUP.value,
            )
            stats = common.summarize(times, items_per_step=batch)
            rates[name].append(stats.median)
            rows.append(
                {"setting": f"{name} #{repeat}", "model": name, "repeat": repeat, **stats.to_dict()}
            )
            print(f"{name:>14} repeat {repeat}: {stats.format('examples/sec')}", flush=True)
            logging.info("%s: %s", name, stats.format("examples/sec"))
    medians = {name: statistics.median(r) for name, r in rates.items()}
    n = len(devices)
    summary = {
        "stages": n,
        "largest_stage_fraction": fraction,
        "largest_stage_goal": 1 / n + 0.1,
        "one_device_eps": medians["one_device"],
    }
    for m in micro:
        summary[f"pipeline_m{m}_eps"] = medians[f"pipeline_m{m}"]
        summary[f"speedup_m{m}"] = medians[f"pipeline_m{m}"] / medians["one_device"]
    for d, peak in _peak_memory(devices, kind).items():
        summary[f"peak_bytes {d}"] = peak
    print(
        f"stages {n} on {kind}: largest stage holds {100 * fraction:.1f}% of the "
        f"bytes (goal <= {100 * (1 / n + 0.1):.1f}%); "
        + ", ".join(f"M={m} {summary[f'speedup_m{m}']:.2f}x" for m in micro)
        + " of one device",
        flush=True,
    )
    common.write_report(
        "model_parallel",
        common.flag_config(),
        rows,
        summary,
        output_json=common.OUTPUT_JSON.value,
        csv_path=common.CSV.value,
        plot_path=common.PLOT.value,
        plot=common.PlotSpec(
            x="setting",
            ys=("median",),
            title="examples/sec (median per repeat)",
            ylabel="examples/sec",
        ),
    )
    print(f"total wall time {time.perf_counter() - started:.1f} s", flush=True)


if __name__ == "__main__":
    app.run(main)
