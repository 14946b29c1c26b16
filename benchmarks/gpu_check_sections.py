"""The sections of `benchmarks/gpu_check.py`, each run in a process of its own.

`gpu_check.py` (the absl binary) starts one process per section with
`--section=NAME` and reads back the JSON the section writes to `opts.out`
(rewritten as the section goes, so a section cut by its time budget still
leaves what it measured). Every function here takes a `SectionOptions`;
none reads flags. See `gpu_check.py` for what each section checks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import statistics
import time

# The one line gpu_check.py prints where TensorFlow sees no GPU (here, not
# in gpu_check.py, so tests read it without defining that binary's flags).
NO_GPU = "gpu_check: no GPU visible to TensorFlow"

EQUAL_TOL = 1e-4  # 2 workers vs one process, float32, TF32 off
POWERSGD_TOL = 1e-4  # full-rank PowerSGD vs uncompressed
ZERO_TOL = 1e-5  # ZeRO-1 Adam vs unsharded Adam
LOSS_TOL = 0.1  # mixed precision held-out loss vs float32 (reported)
POLICIES = ("float32", "mixed_float16", "mixed_bfloat16")


@dataclasses.dataclass(frozen=True)
class SectionOptions:
    """What a section runs with (the binary's flags, sizes already resolved).

    Attributes:
        out: str. Where the section writes its JSON.
        dry_run_cpu: bool. On CPU with tiny sizes.
        batch_size: int. Batch per replica (the correctness sections cap it).
        width: int. MLP width of the precision section.
        rounds, steps_per_round: int. The precision section's timing.
        equal_steps: int. Steps trained before weights are compared.
        logical_memory_mb: int. Memory limit of each logical GPU device.
        budget_s: float. The section's time budget (it stops rounds early).
        all_reduce: str. The two_workers workers' `all_reduce`.
    """

    out: str
    dry_run_cpu: bool = False
    batch_size: int = 1024
    width: int = 4096
    rounds: int = 6
    steps_per_round: int = 50
    equal_steps: int = 30
    logical_memory_mb: int = 8192
    budget_s: float = 0.0
    all_reduce: str = "nccl"


def save(path, data):
    """Writes `data` as JSON, atomically (a reader never sees half a file)."""
    with open(path + ".tmp", "w") as f:
        json.dump(data, f, indent=2, default=str)
        f.write("\n")
    os.replace(path + ".tmp", path)


def probe(opts):
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    gpus = []
    for d in tf.config.list_physical_devices("GPU"):
        details = tf.config.experimental.get_device_details(d)
        gpus.append(
            {
                "name": d.name,
                "device_name": details.get("device_name"),
                "compute_capability": details.get("compute_capability"),
            }
        )
    import keras  # pylint: disable=g-import-not-at-top

    save(
        opts.out,
        {
            "section": "probe",
            "status": "done",
            "environment": {
                "tf": tf.__version__,
                "keras": keras.__version__,
                "built_with_cuda": tf.test.is_built_with_cuda(),
                "cuda": tf.sysconfig.get_build_info().get("cuda_version"),
                "cudnn": tf.sysconfig.get_build_info().get("cudnn_version"),
                "gpus": gpus,
                "dry_run_cpu": opts.dry_run_cpu,
            },
        },
    )
    return 0


def _data(n, dim, seed, classes=10):
    """A learnable task: labels are the argmax of a fixed random linear map."""
    import numpy as np  # pylint: disable=g-import-not-at-top

    teacher = np.random.default_rng(1234).normal(size=(dim, classes))
    x = np.random.default_rng(seed).normal(size=(n, dim)).astype("float32")
    return x, np.argmax(x @ teacher, axis=1).astype("int32")


def _mlp(keras, dim, width, policy="float32"):
    keras.config.set_dtype_policy(policy)
    try:
        inputs = keras.Input((dim,))
        h = inputs
        for _ in range(3):
            h = keras.layers.Dense(width, activation="gelu")(h)
            h = keras.layers.LayerNormalization()(h)
        outputs = keras.layers.Dense(10, dtype="float32")(h)
        return keras.Model(inputs, outputs)
    finally:
        keras.config.set_dtype_policy("float32")


def _max_rel(a, b):
    import numpy as np  # pylint: disable=g-import-not-at-top

    return max(float(np.abs(x - y).max() / (np.abs(y).max() + 1e-30)) for x, y in zip(a, b))


def precision(opts):
    import keras  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    import tfdist_opt  # pylint: disable=g-import-not-at-top

    strategy = tfdist_opt.opt_strategy()
    deadline = time.monotonic() + 0.85 * opts.budget_s
    batch, width, steps = opts.batch_size, opts.width, opts.steps_per_round
    dim = max(16, width // 2)
    x, y = _data(batch * 16, dim, seed=0)
    xt, yt = _data(batch * 4, dim, seed=1)
    data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(batch).prefetch(4)
    keras.utils.set_random_seed(3)
    initial = _mlp(keras, dim, width).get_weights()
    settings = [(p, jit) for jit in (False, True) for p in POLICIES]
    trained = []
    result = {"section": "precision", "status": "compiling", "compiled": 0}
    for policy, jit in settings:
        with strategy.scope():
            model = _mlp(keras, dim, width, policy)
            model.set_weights(initial)
            model.compile(
                keras.optimizers.SGD(0.01, momentum=0.9),
                keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                jit_compile=jit,
            )
        model.fit(data, steps_per_epoch=steps, epochs=1, verbose=0)  # trace, compile
        trained.append((model, iter(strategy.experimental_distribute_dataset(data))))
        result["compiled"] = len(trained)  # a cut run shows how far it got
        save(opts.out, result)
    rows = [
        {
            "setting": f"{p} xla={'on' if j else 'off'}",
            "policy": p,
            "xla": j,
            "ex_per_s": [],
            "round_loss": [],
        }
        for p, j in settings
    ]
    result.update(status="running", plan=_plan(strategy), rows=rows)
    for r in range(opts.rounds):
        if r and time.monotonic() > deadline:
            result["stopped_early"] = f"after {r} round(s): budget"
            break
        order = range(len(settings)) if r % 2 == 0 else reversed(range(len(settings)))
        for k in order:
            model, iterator = trained[k]
            model.reset_metrics()
            start = time.perf_counter()
            for _ in range(steps):
                logs = model.train_function(iterator)
            loss = float(logs["loss"])  # waits for the last step
            rows[k]["ex_per_s"].append(steps * batch / (time.perf_counter() - start))
            rows[k]["round_loss"].append(loss)
        save(opts.out, result)
    summary = {}
    for row, (model, _) in zip(rows, trained):
        row["median_ex_per_s"] = statistics.median(row["ex_per_s"])
        row["heldout_loss"] = float(model.evaluate(xt, yt, batch_size=batch, verbose=0))
    for row in rows:
        base = next(r for r in rows if r["policy"] == "float32" and r["xla"] == row["xla"])
        row["heldout_loss_rel_vs_float32"] = abs(row["heldout_loss"] - base["heldout_loss"]) / abs(
            base["heldout_loss"]
        )
        row["within_loss_tol"] = row["heldout_loss_rel_vs_float32"] <= LOSS_TOL
        key = f"{row['policy']}_xla_{'on' if row['xla'] else 'off'}"
        summary[f"ex_per_s_{key}"] = row["median_ex_per_s"]
        summary[f"speedup_{key}"] = row["median_ex_per_s"] / rows[0]["median_ex_per_s"]
    result.update(
        status="done",
        summary=summary,
        loss_tol=LOSS_TOL,
        global_batch=batch,
        width=width,
        steps_per_round=steps,
    )
    save(opts.out, result)
    return 0


def _plan(strategy):
    return {
        "strategy": type(strategy).__name__,
        "replicas": strategy.num_replicas_in_sync,
        "devices": list(getattr(strategy.extended, "worker_devices", ())),
    }


def _limit_gpu(count, memory_mb):
    """GPU 0 as `count` logical devices with memory limits (none on CPU)."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        tf.config.set_logical_device_configuration(
            gpus[0], [tf.config.LogicalDeviceConfiguration(memory_limit=memory_mb)] * count
        )
    tf.config.experimental.enable_tensor_float_32_execution(False)
    return bool(gpus)


def worker(opts):
    import keras  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    import tfdist_opt  # pylint: disable=g-import-not-at-top

    _limit_gpu(1, opts.logical_memory_mb)
    strategy = tfdist_opt.opt_strategy(all_reduce=opts.all_reduce)
    batch, steps, dim, width = min(opts.batch_size, 256), opts.equal_steps, 64, 256
    global_batch = batch * strategy.num_replicas_in_sync
    x, y = _data(global_batch * steps, dim, seed=0)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch).with_options(options)
    keras.utils.set_random_seed(5)
    initial = _mlp(keras, dim, width).get_weights()

    def fit(scope):
        with scope:
            model = _mlp(keras, dim, width)
            model.set_weights(initial)
            model.compile(
                keras.optimizers.SGD(0.05),
                keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            )
        times = []
        stamp = keras.callbacks.LambdaCallback(
            on_train_batch_end=lambda b, logs: times.append(time.perf_counter())
        )
        model.fit(data, epochs=1, verbose=0, shuffle=False, callbacks=[stamp])
        gaps = [b - a for a, b in zip(times, times[1:])]
        gaps = gaps[min(2, len(gaps) - 1) :]  # warm-up steps out, one kept
        return model.get_weights(), global_batch / statistics.median(gaps)

    from tfdist_opt.strategy import topology  # pylint: disable=g-import-not-at-top

    chief = topology.strategy_is_chief(strategy)
    weights, rate = fit(strategy.scope())
    result = {
        "section": "two_workers",
        "status": "running",
        "plan": _plan(strategy),
        "all_reduce": opts.all_reduce,
        "ex_per_s_worker": rate,
        "global_batch": global_batch,
        "steps": steps,
    }
    save(opts.out, result)
    if chief:
        # One process, the same global batch: plain Keras, no strategy.
        reference, reference_rate = fit(contextlib.nullcontext())
        diff = _max_rel(weights, reference)
        result["summary"] = {
            "two_workers_max_rel_vs_one_process": diff,
            "two_workers_ex_per_s": rate,
            "one_process_ex_per_s": reference_rate,
        }
        result.update(ok=diff <= EQUAL_TOL, tolerance=EQUAL_TOL)
    result["status"] = "done"
    save(opts.out, result)
    return 0


def gradients(opts):
    import keras  # pylint: disable=g-import-not-at-top

    import tfdist_opt  # pylint: disable=g-import-not-at-top
    from tfdist_opt.gradients.binding import keras_binding  # pylint: disable=g-import-not-at-top
    from tfdist_opt.gradients.options import GradientOptions  # pylint: disable=g-import-not-at-top

    on_gpu = _limit_gpu(2, opts.logical_memory_mb)
    strategy = tfdist_opt.opt_strategy(
        fused_updates=False, **({} if on_gpu else {"cpu_replicas": 2})
    )
    batch, steps = min(opts.batch_size, 128), opts.equal_steps
    global_batch = batch * strategy.num_replicas_in_sync
    x, y = _data(global_batch * steps, 16 * 16 * 3, seed=0)
    x = x.reshape(-1, 16, 16, 3)
    keras.utils.set_random_seed(9)

    def fit(options, optimizer):
        keras_binding.attach(strategy, options)
        keras.utils.set_random_seed(9)
        with strategy.scope():
            model = keras.Sequential(
                [
                    keras.Input((16, 16, 3)),
                    keras.layers.Conv2D(16, 3, activation="tanh"),
                    keras.layers.Flatten(),
                    keras.layers.Dense(10),
                ]
            )
            model.compile(optimizer(), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.fit(x, y, batch_size=global_batch, epochs=1, verbose=0, shuffle=False)
        return model.get_weights()

    def sgd():
        return keras.optimizers.SGD(0.05, momentum=0.9)

    def adam():
        # A large epsilon keeps Adam's update continuous in the gradient:
        # GPU kernels may sum in another order run to run, and with the
        # default 1e-7 a near-zero gradient's sign flip moves a weight by
        # 2 x lr, which no tolerance could tell from a wrong shard.
        return keras.optimizers.Adam(0.01, epsilon=1e-3)

    plain = GradientOptions(fused_updates=False)
    psgd = dict(
        compression="powersgd",
        powersgd_min_compression=0,
        powersgd_start_step=0,
        fused_updates=False,
    )
    result = {"section": "gradients", "status": "running", "plan": _plan(strategy)}
    sgd_ref = fit(plain, sgd)
    full = _max_rel(fit(GradientOptions(powersgd_rank=32, **psgd), sgd), sgd_ref)
    rank1 = _max_rel(fit(GradientOptions(powersgd_rank=1, **psgd), sgd), sgd_ref)
    result["powersgd"] = {
        "full_rank_max_rel": full,
        "rank1_max_rel": rank1,
        "tolerance": POWERSGD_TOL,
    }
    save(opts.out, result)
    adam_ref = fit(plain, adam)
    zero = _max_rel(
        fit(GradientOptions(shard_optimizer_state=True, fused_updates=False), adam), adam_ref
    )
    result["zero1"] = {"max_rel": zero, "tolerance": ZERO_TOL}
    ok = full <= POWERSGD_TOL and rank1 > POWERSGD_TOL and zero <= ZERO_TOL
    result.update(
        status="done",
        ok=ok,
        summary={
            "powersgd_full_rank_max_rel": full,
            "powersgd_rank1_max_rel": rank1,
            "zero1_max_rel": zero,
            "gradients_ok": ok,
        },
    )
    save(opts.out, result)
    return 0


RUNNERS = {"probe": probe, "precision": precision, "worker": worker, "gradients": gradients}
