"""Keras logs under 2 workers: folded into the gradient collective, or not.

Prints one JSON line per (config, mode): the per-step logs of a 3-metric
classifier fitted from the same initial weights on the same data, the final
weights, how many log values the traced step answered from the gradient
collective (`folded`) and how many packed log collectives it issued.
Modes: "as_shipped" (first, with nothing set: the shipped defaults
decide), "upstream" (one collective per logged value, Keras's path) and
"folded". Configs: PowerSGD from update 2 (the first two
updates uncompressed, so both branches carry the logs), uncompressed
with `bytes_per_pack="auto"` (our packed all-reduce), and every default
(TF's one pack, run through our hooks on multi-worker).
"""

import json
import sys

import numpy as np
import keras

import tfdist_opt
from tests.multiworker.scripts import step_logs
from tests.multiworker.scripts.step_logs import Logs

CONFIGS = {
    "powersgd": dict(
        compression="powersgd", powersgd_rank=2, powersgd_start_step=2, powersgd_min_compression=0
    ),
    "packed": dict(bytes_per_pack="auto"),
    # Every default: streamed pieces, through our hooks (multi-worker).
    "defaults": dict(),
    # bf16 gradients in streamed pieces; the logs ride along uncast.
    "bf16": dict(compression="bf16"),
}
config = sys.argv[1]
strategy = tfdist_opt.opt_strategy(tfdist_opt.StrategyConfig(**CONFIGS[config]))
x, y = step_logs.data()


def build():
    keras.utils.set_random_seed(1)
    with strategy.scope():
        model = keras.Sequential(
            [
                keras.Input((8,)),
                keras.layers.Dense(6, activation="tanh"),
                keras.layers.Dense(3, activation="softmax"),
            ]
        )
        model.compile(
            optimizer=keras.optimizers.SGD(0.1, momentum=0.5),
            loss="sparse_categorical_crossentropy",
            metrics=[
                "sparse_categorical_accuracy",
                keras.metrics.SparseTopKCategoricalAccuracy(k=2),
                keras.metrics.SparseCategoricalCrossentropy(),
            ],
        )
    return model


for mode, fold in (("as_shipped", None), ("upstream", False), ("folded", True)):
    if fold is not None:
        type(strategy)._pack_log_reductions = fold
        type(strategy)._fold_logs = fold
    packer = strategy._log_packer
    packer.folded = packer.collectives = 0
    model = build()
    logs = Logs()
    model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0, callbacks=[logs])
    out = {
        "config": config,
        "mode": mode,
        "logs": logs.steps,
        "weights": [w.tolist() for w in model.get_weights()],
        "folded": packer.folded,
        "log_collectives": packer.collectives,
    }
    print("RESULT " + json.dumps(out), flush=True)
