"""Worker for tests/multiworker/test_data_sharding.py.

Builds the input pipeline under `tfdist_opt.opt_strategy()` (TF_CONFIG set by
the harness) for each case of CASES_JSON, in order, on one cluster: runs
`epochs` epochs through the distributed dataset, writes the element ids this
worker saw per epoch to `OUT_ROOT/<case>/worker<i>.json`, and trains one
epoch with `model.fit` to show equal steps do not hang. Before each case it
prints `CASE <name>`, so the test can read each case's log lines apart; a
case that raises writes its traceback as `error` and the next case runs.

usage: data_shard_worker.py OUT_ROOT CASES_JSON
  CASES_JSON: [{"name", "pattern", "policy", "global_batch", "epochs"?}, ...]
"""

import json
import os
import sys
import traceback


def run_case(strategy, pattern, policy, global_batch, epochs):
    import keras
    import tensorflow as tf

    from tests.data.records import parse_id
    from tfdist_opt import data

    inp = data.build_input(
        pattern,
        strategy,
        global_batch,
        map_fn=parse_id,
        options=data.PipelineOptions(shard_policy=policy, seed=3),
    )
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
        pattern,
        strategy,
        global_batch,
        map_fn=lambda s: (tf.cast(tf.reshape(parse_id(s), [1]), tf.float32), 1.0),
        options=data.PipelineOptions(shard_policy=policy, seed=3),
    )
    with strategy.scope():
        model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
        model.compile("sgd", "mse")
    history = model.fit(ds, epochs=1, verbose=0, shuffle=False)
    return plan, {
        "policy": plan.policy,
        "steps": plan.steps_per_epoch,
        "shard_sizes": list(plan.shard_sizes),
        "dropped": plan.examples_dropped,
        "epochs": seen,
        "fit_epochs": len(history.history["loss"]),
    }


def main(argv):
    out_root, cases = argv[1], json.loads(argv[2])
    from absl import logging

    import tfdist_opt

    logging.set_verbosity(logging.INFO)  # show the one sharding line

    strategy = tfdist_opt.opt_strategy(all_reduce="ring")
    index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    for case in cases:
        print(f"CASE {case['name']}", flush=True)
        sys.stderr.flush()
        try:
            _, report = run_case(
                strategy,
                case["pattern"],
                case["policy"],
                int(case["global_batch"]),
                int(case.get("epochs", 2)),
            )
        except Exception:  # pylint: disable=broad-except
            report = {"error": traceback.format_exc()}
            print(report["error"], flush=True)
        sys.stderr.flush()
        out_dir = os.path.join(out_root, case["name"])
        os.makedirs(out_dir, exist_ok=True)
        with open(os.path.join(out_dir, f"worker{index}.json"), "w") as f:
            json.dump(report, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
