"""Worker script: BatchSizeFinder on a real cluster (injected OOM, plateau).

Prints one line `RESULT {json}` with both results.
"""

import json

import tfdist_opt

strategy = tfdist_opt.opt_strategy(all_reduce="ring")

from tfdist_opt.callbacks import BatchSizeFinder  # noqa: E402
from tests.callbacks.test_batch_size_finder import dataset_fn, model_fn  # noqa: E402

oom = BatchSizeFinder(start=4, max_batch_size=256, steps_per_trial=2, warmup_steps=1,
                      rel_tolerance=0.0, base_lr=0.1, base_batch_size=8).find(
    model_fn(oom_from=16), dataset_fn(), strategy)
plateau = BatchSizeFinder(start=10, max_batch_size=1280, steps_per_trial=3,
                          warmup_steps=1, rel_tolerance=0.2).find(
    model_fn(), dataset_fn(sleep=lambda gbs: max(0.04, gbs * 5e-4)), strategy)
print("RESULT " + json.dumps({
    "oom": [oom.per_replica_batch_size, oom.learning_rate, oom.stop_reason,
            sorted(oom.examples_per_sec)],
    "plateau": [plateau.per_replica_batch_size, plateau.stop_reason,
                sorted(plateau.examples_per_sec)]}), flush=True)
