"""Worker script for the restart / preemption tests (issue 8, cases 6, 7, 10).

Run under `tfdist-opt launch -n 2 [--max-restarts R] -- python rel_train.py ...`.
Trains a tiny Dense model (96 examples, global batch 8: 12 steps per epoch,
3 epochs = 36 optimizer steps) under `opt_strategy()` with
`DistributedBackupAndRestore(BACKUP, save_freq=4)`, unshuffled, so a resumed
run must end bit-identical to an uninterrupted one.

Flags:
  --out DIR, --backup DIR (`{index}` in DIR becomes the worker index: an
      unshared backup dir per worker, the usual multi-host mistake;
      `{attempt}` the attempt: a fresh directory after each restart, so only
      Ray's stored checkpoint can resume the run)
  --crash-task I --crash-at-step K: task I `os._exit(1)`s (with
      --crash-sigkill: SIGKILLs itself) right after optimizer step K, on the
      first attempt only (TFDIST_LAUNCH_RESTART_COUNT == 0), like a crashed host.
  --die-in-save-step M --die-in-save-attempt A: on attempt A the chief
      `os._exit(1)`s inside the save of step M, after the backup is written
      and before it is committed (case 8).
  --batch-sleep S: sleep S seconds after each batch on the first attempt
      (so a test can send SIGTERM mid-training); --sleep-every-attempt: on
      every attempt; --sleep-attempts N: on the first N attempts;
      --later-batch-sleep S2: S2 instead of S after the first attempt.
  --pace-file F: after each batch, sleep the seconds F holds (nothing while
      F is missing); `hold` waits until F says otherwise, so a test can pace
      every attempt by phase instead of by attempt number.
  --strategy-kwargs JSON: extra `opt_strategy()` arguments, e.g.
      '{"grad_accum": 3}'.
  --stall-kind input|sigstop --stall-task I --stall-at-step K: on the
      first attempt only, task I stalls: `input`: its `tf.data` input sleeps
      10 minutes producing batch K (a `numpy_function` in `map`);
      `sigstop`: it SIGSTOPs itself after optimizer step K. Writes
      OUT/stall-<i> (wall time) when the stall starts.
  --heartbeat-timeout-s S: TF's coordination service declares a silent
      task dead after S seconds instead of its default 10 (configured
      before the strategy, which then keeps it), so a test of a SIGSTOPped
      worker is not a race between the stall abort and that heartbeat.
  --check-input-errors: before training, check with the real 2-worker
      strategy that an indivisible global batch (given to build_dataset, or
      a plain tf.data batch given to fit) and FILE sharding with fewer
      files than workers raise ValueError before any step (case 10).

Writes OUT/attempt-<a>-worker-<i>.json when fit returns (weights, optimizer
step, restored backup); OUT/start-<i>-<a> (wall time at process start),
OUT/restored-<i>-<a> (the backup `fit` resumed from), OUT/replicas-<i>-<a>
(the strategy's replica count), OUT/crash-<i> (wall
time of a crash), OUT/pid-<i> and OUT/training-<i>-<a> (first batch done)
so a test can signal a worker at a known phase and time what happened.
"""

import argparse
import json
import os
import signal
import sys
import time


def _pace(path):
    """Sleeps what `path` says: seconds, or `hold` (poll until it changes)."""
    while True:
        try:
            with open(path) as f:
                value = f.read().strip()
        except FileNotFoundError:
            return
        if value != "hold":
            time.sleep(float(value or 0))
            return
        time.sleep(0.05)


def _configure_heartbeat(seconds):
    """TF's coordination service as the multi-worker strategy configures it
    (TF 2.21, `CollectiveAllReduceExtended._initialize_multi_worker`, which
    keeps a service already configured), with `seconds` of heartbeat."""
    from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2  # pylint: disable=g-import-not-at-top
    from tensorflow.python.eager import context  # pylint: disable=g-import-not-at-top

    cluster = json.loads(os.environ["TF_CONFIG"])["cluster"]
    jobs = [job for job in ("chief", "worker") if job in cluster]
    context.context().configure_coordination_service(
        service_type="standalone",
        service_leader=f"/job:{jobs[0]}/replica:0/task:0",
        heartbeat_timeout_in_ms=int(seconds * 1000),
        coordinated_jobs=[
            coordination_config_pb2.CoordinatedJob(name=job, num_tasks=len(cluster[job]))
            for job in jobs
        ],
    )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--backup", required=True)
    parser.add_argument("--crash-task", type=int, default=-1)
    parser.add_argument("--crash-at-step", type=int, default=-1)
    parser.add_argument(
        "--crash-sigkill",
        action="store_true",
        help="crash by SIGKILL to itself instead of os._exit(1)",
    )
    parser.add_argument("--die-in-save-step", type=int, default=-1)
    parser.add_argument("--die-in-save-attempt", type=int, default=-1)
    parser.add_argument("--batch-sleep", type=float, default=0.0)
    parser.add_argument(
        "--sleep-every-attempt",
        action="store_true",
        help="--batch-sleep on every attempt, not the first only",
    )
    parser.add_argument(
        "--sleep-attempts", type=int, default=1, help="--batch-sleep on the first N attempts"
    )
    parser.add_argument(
        "--later-batch-sleep",
        type=float,
        default=None,
        help="the sleep on attempts after the first (default: --batch-sleep)",
    )
    parser.add_argument(
        "--pace-file",
        default=None,
        help="after each batch, sleep the seconds this file "
        "holds (none if missing); `hold` waits until it changes",
    )
    parser.add_argument("--check-input-errors", action="store_true")
    parser.add_argument(
        "--strategy-kwargs", default="{}", help="JSON object of extra opt_strategy() arguments"
    )
    parser.add_argument("--stall-kind", choices=["input", "sigstop"])
    parser.add_argument("--heartbeat-timeout-s", type=float, default=0)
    parser.add_argument("--stall-task", type=int, default=-1)
    parser.add_argument("--stall-at-step", type=int, default=-1)
    args = parser.parse_args()

    index = int(os.environ.get("TFDIST_LAUNCH_WORKER_INDEX", "0"))
    attempt = int(os.environ.get("TFDIST_LAUNCH_RESTART_COUNT", "0"))
    args.backup = args.backup.format(index=index, attempt=attempt)
    os.makedirs(args.out, exist_ok=True)
    _write(args.out, f"start-{index}-{attempt}", repr(time.time()))
    with open(os.path.join(args.out, f"pid-{index}"), "w") as f:
        f.write(str(os.getpid()))

    if args.heartbeat_timeout_s:
        _configure_heartbeat(args.heartbeat_timeout_s)
    import tfdist_opt  # pylint: disable=g-import-not-at-top

    strategy = tfdist_opt.opt_strategy(all_reduce="ring", **json.loads(args.strategy_kwargs))

    _write(args.out, f"replicas-{index}-{attempt}", str(strategy.num_replicas_in_sync))
    import keras  # pylint: disable=g-import-not-at-top
    import numpy as np  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    from tfdist_opt import callbacks as cbs  # pylint: disable=g-import-not-at-top
    from tfdist_opt.callbacks import restore_agreement  # pylint: disable=g-import-not-at-top

    input_errors = (
        _check_input_errors(strategy, args.out, index) if (args.check_input_errors) else None
    )

    rng = np.random.RandomState(0)
    x = rng.rand(96, 4).astype("float32")
    y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], "float32")).astype("float32")
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
    stalls = attempt == 0 and index == args.stall_task
    if stalls and args.stall_kind == "input":
        produced = [0]

        def sleep_at(batch):
            produced[0] += 1
            if produced[0] == args.stall_at_step:
                _write(args.out, f"stall-{index}", repr(time.time()))
                print(f"task {index}: input sleeps 600 s", flush=True)
                time.sleep(600)
            return batch

        def slow(a, b):
            a2 = tf.numpy_function(sleep_at, [a], tf.float32)
            a2.set_shape(a.shape)
            return a2, b

        ds = ds.map(slow)

    class Faults(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            _write(args.out, f"restored-{index}-{attempt}", json.dumps(backup.restored))

        def on_train_batch_end(self, batch, logs=None):
            if getattr(self.model, "_tfdist_opt_skipping", False):
                return
            step = int(self.model.optimizer.iterations.numpy())
            marker = os.path.join(args.out, f"training-{index}-{attempt}")
            if not os.path.exists(marker):
                open(marker, "w").close()
            if attempt == 0 and index == args.crash_task and step == args.crash_at_step:
                print(f"task {index}: crashing after step {step}", flush=True)
                _write(args.out, f"crash-{index}", repr(time.time()))
                if args.crash_sigkill:
                    os.kill(os.getpid(), signal.SIGKILL)
                os._exit(1)
            if stalls and args.stall_kind == "sigstop" and step == args.stall_at_step:
                print(f"task {index}: SIGSTOP after step {step}", flush=True)
                _write(args.out, f"stall-{index}", repr(time.time()))
                os.kill(os.getpid(), signal.SIGSTOP)
            sleep = (
                args.batch_sleep
                if attempt == 0 or (args.later_batch_sleep is None)
                else args.later_batch_sleep
            )
            if (attempt < args.sleep_attempts or args.sleep_every_attempt) and sleep:
                time.sleep(sleep)
            if args.pace_file:
                _pace(args.pace_file)

    keras.utils.set_random_seed(1)
    with strategy.scope():
        model = keras.Sequential(
            [keras.Input((4,)), keras.layers.Dense(8, "tanh"), keras.layers.Dense(1)]
        )
        model.compile(keras.optimizers.SGD(0.02, momentum=0.9), "mse")
    backup = cbs.DistributedBackupAndRestore(args.backup, save_freq=4)
    if index == 0 and attempt == args.die_in_save_attempt:

        def die_in_save(meta):
            if meta["step"] == args.die_in_save_step:
                print(f"task 0: dying inside the save of step {meta['step']}", flush=True)
                _write(args.out, "crash-0", repr(time.time()))
                os._exit(1)

        backup._after_write = die_in_save  # pylint: disable=protected-access
    _write(args.out, f"fit-{index}-{attempt}", repr(time.time()))
    try:
        model.fit(ds, epochs=3, verbose=0, shuffle=False, callbacks=[backup, Faults()])
    except restore_agreement.RestoreMismatchError:
        _write(args.out, f"refused-{index}-{attempt}", repr(time.time()))
        raise
    result = {
        "attempt": attempt,
        "index": index,
        "replicas": strategy.num_replicas_in_sync,
        "step": int(model.optimizer.iterations.numpy()),
        "weights": [w.tolist() for w in model.get_weights()],
        "restored": backup.restored,
        "input_errors": input_errors,
        "tf_config": os.environ.get("TF_CONFIG"),
        # Ray Train's controller poll, passed on to its workers
        "ray_poll_s": os.environ.get("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"),
    }
    with open(os.path.join(args.out, f"attempt-{attempt}-worker-{index}.json"), "w") as f:
        json.dump(result, f)
    print(f"DONE attempt={attempt} step={result['step']}", flush=True)
    return 0


def _write(out_dir, name, text):
    with open(os.path.join(out_dir, name), "w") as f:
        f.write(text)


def _check_input_errors(strategy, out_dir, index):
    """Case 10 with the real cluster: both errors come before any step."""
    import numpy as np  # pylint: disable=g-import-not-at-top

    from tests.data.records import write_id_records  # pylint: disable=g-import-not-at-top
    from tfdist_opt import data  # pylint: disable=g-import-not-at-top

    found = {}
    t0 = time.monotonic()
    try:
        data.build_dataset(np.zeros((16, 1), "float32"), strategy, 5)
    except ValueError as e:
        found["indivisible"] = str(e)
    files = os.path.join(out_dir, f"records-{index}")
    os.makedirs(files, exist_ok=True)
    write_id_records(files, [8])
    try:
        data.build_dataset(
            os.path.join(files, "*.tfrecord"),
            strategy,
            4,
            options=data.PipelineOptions(shard_policy="file"),
        )
    except ValueError as e:
        found["too_few_files"] = str(e)
    found["seconds"] = round(time.monotonic() - t0, 3)
    # A plain tf.data pipeline given to fit: refused by fit, before step 1.
    import keras  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    with strategy.scope():
        model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
        model.compile("sgd", "mse")
    try:
        model.fit(
            tf.data.Dataset.from_tensor_slices((np.zeros((16, 1), "float32"),) * 2).batch(5),
            verbose=0,
        )
    except ValueError as e:
        found["fit_indivisible"] = str(e)
    found["fit_iterations"] = int(model.optimizer.iterations.numpy())
    return found


if __name__ == "__main__":
    sys.exit(main())
