"""BatchSizeFinder on a real cluster (injected OOM, plateau).

`find_both(strategy)` prints one line `RESULT {json}` with both results; run
by scripts/cb_train.py (CB_BSF=1) after its training, in the same workers,
or alone as a worker script.
"""

import json


def find_both(strategy):
    from tfdist_opt.callbacks import BatchSizeFinder  # pylint: disable=g-import-not-at-top
    from tests.callbacks.test_batch_size_finder import (  # pylint: disable=g-import-not-at-top
        dataset_fn,
        model_fn,
    )

    # 40 ms per batch: throughput doubles from batch 4 to 8 whatever the
    # machine's load, so the search reaches the injected OOM at 16 (with no
    # delay, one timed step under load sometimes read as a plateau at 8).
    oom = BatchSizeFinder(
        start=4,
        max_batch_size=256,
        steps_per_trial=2,
        warmup_steps=1,
        rel_tolerance=0.0,
        base_lr=0.1,
        base_batch_size=8,
    ).find(model_fn(oom_from=16), dataset_fn(sleep=lambda gbs: 0.04), strategy)
    plateau = BatchSizeFinder(
        start=10, max_batch_size=1280, steps_per_trial=3, warmup_steps=1, rel_tolerance=0.2
    ).find(model_fn(), dataset_fn(sleep=lambda gbs: max(0.04, gbs * 5e-4)), strategy)
    print(
        "RESULT "
        + json.dumps(
            {
                "oom": [
                    oom.per_replica_batch_size,
                    oom.learning_rate,
                    oom.stop_reason,
                    sorted(oom.examples_per_sec),
                ],
                "plateau": [
                    plateau.per_replica_batch_size,
                    plateau.stop_reason,
                    sorted(plateau.examples_per_sec),
                ],
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    import tfdist_opt  # pylint: disable=g-import-not-at-top

    find_both(tfdist_opt.opt_strategy(all_reduce="ring"))
