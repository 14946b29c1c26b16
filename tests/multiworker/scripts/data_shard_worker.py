"""Worker for tests/multiworker/test_data_sharding.py.

Builds the input pipeline under `tfdist_opt.opt_strategy()` (TF_CONFIG set by
the harness), runs `--epochs` epochs through the distributed dataset, writes
the element ids this worker saw per epoch to `OUT_DIR/worker<i>.json`, and
trains one epoch with `model.fit` to show equal steps do not hang.

usage: data_shard_worker.py OUT_DIR PATTERN POLICY GLOBAL_BATCH [EPOCHS]
"""

import json
import os
import sys


def main(argv):
    out_dir, pattern, policy, global_batch = argv[1:5]
    epochs = int(argv[5]) if len(argv) > 5 else 2
    from absl import logging

    import tfdist_opt
    from tfdist_opt import data

    logging.set_verbosity(logging.INFO)  # show the one sharding line

    strategy = tfdist_opt.opt_strategy(all_reduce="ring")
    import keras
    import tensorflow as tf

    from tests.data.records import parse_id

    inp = data.build_input(pattern, strategy, int(global_batch), map_fn=parse_id,
                           options=data.PipelineOptions(shard_policy=policy,
                                                        seed=3))
    plan = inp.plans[0]
    seen = []
    for _ in range(epochs):
        ids = []
        for batch in inp.dataset:
            for local in strategy.experimental_local_results(batch):
                ids += local.numpy().reshape(-1).tolist()
        seen.append(ids)

    # Equal steps on every worker: fit finishes instead of hanging.
    ds = data.build_dataset(
        pattern, strategy, int(global_batch),
        map_fn=lambda s: (tf.cast(tf.reshape(parse_id(s), [1]), tf.float32), 1.0),
        options=data.PipelineOptions(shard_policy=policy, seed=3))
    with strategy.scope():
        model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
        model.compile("sgd", "mse")
    history = model.fit(ds, epochs=1, verbose=0, shuffle=False)

    index = plan.worker_index
    with open(os.path.join(out_dir, f"worker{index}.json"), "w") as f:
        json.dump({"policy": plan.policy, "steps": plan.steps_per_epoch,
                   "shard_sizes": list(plan.shard_sizes),
                   "dropped": plan.examples_dropped, "epochs": seen,
                   "fit_epochs": len(history.history["loss"])}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
