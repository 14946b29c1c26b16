r"""Keras `compile` options under opt_strategy(): XLA, and steps per execution.

Two models with the same initial weights are compiled two ways and trained
on the same synthetic data under one `opt_strategy()` (one device, Mirrored
with `--cpu_replicas`, or a cluster under `tfdist-opt launch`), alternated
round by round (A B, then B A, ...). Each round times `--steps_per_round`
calls of Keras's own train function on a distributed iterator, after one
`fit` call that builds and traces it and one untimed round (warm-up).

`--compare`:
- `jit`: `compile(jit_compile=False)` (baseline) vs `jit_compile=True`
  (XLA on each replica's step; under a multi-replica strategy through
  `tfdist_opt.keras.xla_steps`). Summary `jit_speedup`.
- `steps_per_execution`: `steps_per_execution=1` (baseline) vs
  `--steps_per_execution` N (one call runs N steps; Keras then reduces the
  logs once per N steps). Summary `spe_speedup`.

Rates are examples per second over the global batch; the summary ratio is
the median of the per-round ratios (the two settings of a round ran back
to back, so a host that changes speed between rounds cancels out).

Example:
    python benchmarks/keras_compile.py --model=mlp --compare=jit \
        --output_json=/tmp/jit.json
    tfdist-opt launch -n 2 -- python benchmarks/keras_compile.py \
        --model=mlp --compare=steps_per_execution --steps_per_execution=8
"""

from __future__ import annotations

import os
import statistics
import sys
import time

from absl import app
from absl import flags

if __package__ in (None, ""):  # run as `python benchmarks/keras_compile.py`
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import common  # pylint: disable=g-import-not-at-top
from benchmarks.train_lib import compile_compare  # pylint: disable=g-import-not-at-top
from benchmarks.train_lib import models  # pylint: disable=g-import-not-at-top

COMPARES = {
    "jit": ("jit_compile=False", "jit_compile=True"),
    "steps_per_execution": ("steps_per_execution=1", "steps_per_execution=N"),
}

_MODEL = flags.DEFINE_enum("model", "mlp", ["mlp", "cnn_small"], "Model to train.")
_COMPARE = flags.DEFINE_enum("compare", "jit", list(COMPARES), "What to compare.")
_BATCH = flags.DEFINE_integer("batch_size", 32, "Batch size per replica.")
_ROUNDS = flags.DEFINE_integer("rounds", 6, "Alternated rounds per setting.")
_STEPS = flags.DEFINE_integer(
    "steps_per_round", 10, "Train-function calls timed per setting per round."
)
_SPE = flags.DEFINE_integer("steps_per_execution", 8, "N for --compare=steps_per_execution.")
_IMAGE = flags.DEFINE_integer("image_size", None, "Input side (default per model).")
_NUM_CLASSES = 10
_strategy_config = common.define_strategy_flags()


compile_kwargs = compile_compare.compile_kwargs
steps_per_call = compile_compare.steps_per_call


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    import tfdist_opt  # pylint: disable=g-import-not-at-top

    strategy = tfdist_opt.opt_strategy(_strategy_config())
    import keras  # pylint: disable=g-import-not-at-top
    import numpy as np  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    compare, spe = _COMPARE.value, _SPE.value
    size = _IMAGE.value or {"mlp": 16, "cnn_small": 32}[_MODEL.value]
    global_batch = _BATCH.value * strategy.num_replicas_in_sync
    rng = np.random.RandomState(0)
    x = rng.rand(global_batch * 8, size, size, 3).astype("float32")
    y = rng.randint(0, _NUM_CLASSES, size=(len(x),)).astype("int32")
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(global_batch)

    trained = []
    for which in (0, 1):
        with strategy.scope():
            keras.utils.set_random_seed(1)
            model = models.build_model(_MODEL.value, size, _NUM_CLASSES)
            model.compile(
                keras.optimizers.SGD(0.01),
                keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                **compile_kwargs(compare, which, spe),
            )
        # Builds, traces and runs the train function once (warm-up).
        model.fit(dataset, steps_per_epoch=steps_per_call(compare, which, spe), epochs=1, verbose=0)
        iterator = iter(strategy.experimental_distribute_dataset(dataset))
        trained.append((model, iterator))

    def run(which):
        model, iterator = trained[which]
        start = time.perf_counter()
        for _ in range(_STEPS.value):
            logs = model.train_function(iterator)
        float(logs["loss"])  # waits for the last call
        elapsed = time.perf_counter() - start
        examples = _STEPS.value * steps_per_call(compare, which, spe) * global_batch
        return examples / elapsed

    for which in (0, 1):  # one untimed round: the fresh iterators fill
        run(which)
    rates = {0: [], 1: []}
    for r in range(_ROUNDS.value):
        for which in (0, 1) if r % 2 == 0 else (1, 0):
            rates[which].append(run(which))
        print(
            f"round {r}: {COMPARES[compare][0]} {rates[0][-1]:.1f} ex/s, "
            f"{COMPARES[compare][1]} {rates[1][-1]:.1f} ex/s",
            flush=True,
        )
    ratios = [b / a for a, b in zip(rates[0], rates[1])]
    rows = [
        {
            "setting": COMPARES[compare][w],
            "median_ex_per_s": statistics.median(rates[w]),
            "min_ex_per_s": min(rates[w]),
            "max_ex_per_s": max(rates[w]),
            "rounds": rates[w],
        }
        for w in (0, 1)
    ]
    key = "jit_speedup" if compare == "jit" else "spe_speedup"
    summary = {
        key: statistics.median(ratios),
        f"{key}_min": min(ratios),
        f"{key}_max": max(ratios),
        "global_batch": global_batch,
        "replicas": strategy.num_replicas_in_sync,
    }
    print(f"{key}: {summary[key]:.3f} (rounds {min(ratios):.3f}-{max(ratios):.3f})")
    common.write_report(
        "keras_compile",
        common.flag_config(),
        rows,
        summary,
        output_json=common.OUTPUT_JSON.value,
        csv_path=common.CSV.value,
    )


if __name__ == "__main__":
    app.run(main)
