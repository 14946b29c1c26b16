r"""The prepared GPU check: what must hold on a GPU, in one command (<= 8 min).

    python benchmarks/gpu_check.py --output_json=benchmarks/results/gpu_check_h100.json

Sections, each in a process of its own with a time budget (a section out of
time is killed and named; the JSON is rewritten after every section, and each
section rewrites its own part after every round, so a cut run keeps what ran):

1. `probe`: TensorFlow's version, whether it was built with CUDA, the GPUs.
   No GPU: one line saying so, exit status 0.
2. `precision`: one process over GPU 0 (`opt_strategy()`: one device). An
   MLP (dense, gelu, layer norm) trains from the same weights on the same
   batches in 6 settings, float32 / mixed_float16 / mixed_bfloat16, each
   with XLA off and on (`compile(jit_compile=...)`), interleaved in rounds.
   Per setting: examples/s (median of the rounds), each round's mean
   training loss side by side, and the held-out loss relative to float32's
   with the same XLA setting (reported against `LOSS_TOL`, not a failure).
3. `two_workers`: 2 worker processes share GPU 0, each on one logical
   device with a memory limit (`tf.config.set_logical_device_configuration`),
   under `opt_strategy()` (MultiWorkerMirrored). First with
   `all_reduce=nccl`; NCCL refuses two ranks on one physical GPU ("Duplicate
   GPU detected"), and if it does, the fallback `all_reduce=ring` runs and
   the JSON names it with NCCL's error. The chief's weights after
   `--equal_steps` steps must equal plain Keras on one device with the same
   global batch (trained in the chief afterwards) within `EQUAL_TOL`.
4. `gradients`: one process, GPU 0 split into 2 logical devices, so
   `opt_strategy()` mirrors over 2 replicas (hierarchical copy: not NCCL on
   a split GPU). PowerSGD at full rank equals uncompressed training within
   `POWERSGD_TOL`, ZeRO-1 (`shard_optimizer_state`, Adam) equals unsharded
   Adam within `ZERO_TOL`, and PowerSGD at rank 1 differs by more than
   `POWERSGD_TOL` (the comparison can fail).

The sections that compare weights turn TF32 off
(`tf.config.experimental.enable_tensor_float_32_execution(False)`): with
it, float32 matmuls on Ampere and later round inputs to 10 mantissa bits and
a different batch split changes the digits. Tolerances are max |w - w_ref|
over max |w_ref|, per weight, after all steps. The exit status is 1 when a
comparison fails or a section does not finish.

`--dry_run_cpu` runs the same code on CPU with tiny sizes (GPUs hidden, no
memory limits, 2 virtual CPUs in `gradients`; `all_reduce=nccl` is then
refused by `opt_strategy()`'s plan, which takes the fallback path), so the
script is exercised on machines without a GPU (tests/benchmarks/test_gpu_check.py).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags

if __package__ in (None, ""):  # run as `python benchmarks/gpu_check.py`
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import common  # pylint: disable=g-import-not-at-top

EQUAL_TOL = 1e-4       # 2 workers vs one process, float32, TF32 off
POWERSGD_TOL = 1e-4    # full-rank PowerSGD vs uncompressed
ZERO_TOL = 1e-5        # ZeRO-1 Adam vs unsharded Adam
LOSS_TOL = 0.1         # mixed precision held-out loss vs float32 (reported)
POLICIES = ("float32", "mixed_float16", "mixed_bfloat16")
NO_GPU = "gpu_check: no GPU visible to TensorFlow"
SECTIONS = {"precision": 0.35, "two_workers": 0.40, "gradients": 0.25}

_DRY = flags.DEFINE_boolean(
    "dry_run_cpu", False, "Run every section on CPU with tiny sizes (GPUs "
    "hidden): exercises the script where no GPU is.")
_BUDGET = flags.DEFINE_float(
    "budget_s", 420.0, "Seconds for the sections together (probe apart), "
    "shared " + ", ".join(f"{k} {v:.0%}" for k, v in SECTIONS.items()) + ".")
_BATCH = flags.DEFINE_integer("batch_size", 512, "Batch per replica.")
_WIDTH = flags.DEFINE_integer("width", 2048, "MLP width (precision section).")
_ROUNDS = flags.DEFINE_integer("rounds", 6, "Interleaved rounds (precision).")
_STEPS = flags.DEFINE_integer("steps_per_round", 20, "Steps per setting per round.")
_EQUAL_STEPS = flags.DEFINE_integer(
    "equal_steps", 30, "Steps trained before weights are compared (two_workers, gradients).")
_MEMORY_MB = flags.DEFINE_integer(
    "logical_memory_mb", 8192, "Memory limit of each logical GPU device.")
_SECTION = flags.DEFINE_string("section", None, "Internal: run one section here.")
_SECTION_OUT = flags.DEFINE_string("section_out", None, "Internal: the section's JSON.")
_ALL_REDUCE = flags.DEFINE_string("worker_all_reduce", "nccl", "Internal: two_workers.")

_FORWARDED = (_DRY, _BATCH, _WIDTH, _ROUNDS, _STEPS, _EQUAL_STEPS, _MEMORY_MB)
_DRY_SIZES = {"batch_size": 8, "width": 32, "rounds": 2, "steps_per_round": 2,
              "equal_steps": 3}


def _size(flag):
    """A size flag's value, tiny under --dry_run_cpu unless set explicitly."""
    if _DRY.value and not flags.FLAGS[flag.name].present:
        return _DRY_SIZES[flag.name]
    return flag.value


# --------------------------------------------------------------- the parent
def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    if _SECTION.value:
        return _SECTION_RUNNERS[_SECTION.value]()
    return _orchestrate()


def _orchestrate() -> int:
    """Runs each section in a child (this process never starts TF's runtime)."""
    tmp = tempfile.mkdtemp(prefix="gpu_check_")
    report = {"benchmark": "gpu_check", "config": common.flag_config(),
              "environment": {"python": platform.python_version(),
                              "platform": platform.platform(),
                              "cpu_count": os.cpu_count(),
                              "load_avg_1m": os.getloadavg()[0]},
              "results": [], "summary": {}}
    probe = _child("probe", tmp, 120)
    if probe.get("status") != "done":
        print(f"gpu_check: the probe failed: {probe.get('error')}", flush=True)
        return 1
    report["environment"].update(probe["environment"])
    if not probe["environment"]["gpus"] and not _DRY.value:
        report["summary"] = {"gpus": 0, "checked": False}
        _write(report)
        shutil.rmtree(tmp, ignore_errors=True)
        print(f"{NO_GPU} {probe['environment']['tf']} (built with CUDA: "
              f"{probe['environment']['built_with_cuda']}); nothing to check "
              "(--dry_run_cpu runs the same code on CPU).", flush=True)
        return 0
    failed = []
    for name, share in SECTIONS.items():
        budget = max(60.0, share * _BUDGET.value)
        row = (_two_workers(tmp, budget) if name == "two_workers"
               else _child(name, tmp, budget))
        report["results"].append(row)
        report["summary"].update(row.get("summary", {}))
        _write(report)
        print(f"{name}: {row.get('status')} in {row.get('wall_s', 0):.0f} s; "
              + json.dumps(row.get("summary", {})), flush=True)
        if row.get("status") != "done" or row.get("ok") is False:
            failed.append(name)
    report["summary"]["failed_sections"] = failed
    _write(report)
    if failed:
        print(f"gpu_check: FAILED: {', '.join(failed)} (logs in {tmp})", flush=True)
        return 1
    shutil.rmtree(tmp, ignore_errors=True)
    print("gpu_check: all checks passed" + (" (dry run on CPU)" if _DRY.value else ""),
          flush=True)
    return 0


def _write(report):
    path = common.OUTPUT_JSON.value
    if path:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        _save(path, report)


def _save(path, data):
    with open(path + ".tmp", "w") as f:
        json.dump(data, f, indent=2, default=str)
        f.write("\n")
    os.replace(path + ".tmp", path)


def _env(extra=None):
    from tfdist_opt.cluster import log_filter  # pylint: disable=g-import-not-at-top

    env, _ = log_filter.quiet_env(os.environ)
    env.pop("TF_CONFIG", None)
    if _DRY.value:
        env["CUDA_VISIBLE_DEVICES"] = "-1"
    env.update(extra or {})
    return env


def _argv(section, out, *extra):
    args = [sys.executable, os.path.abspath(__file__), f"--section={section}",
            f"--section_out={out}"]
    for flag in _FORWARDED:
        if flags.FLAGS[flag.name].present or flag is _DRY:
            args.append(f"--{flag.name}={flag.value}")
    return args + list(extra)


def _child(section, tmp, budget_s, extra_env=None, *extra):
    """Runs `section` in a child within `budget_s`; its JSON row, or why not."""
    out = os.path.join(tmp, f"{section}.json")
    log = os.path.join(tmp, f"{section}.log")
    start = time.monotonic()
    with open(log, "w") as f:
        proc = subprocess.Popen(
            _argv(section, out, f"--section_budget_s={budget_s:g}", *extra),
            env=_env(extra_env), stdout=f, stderr=subprocess.STDOUT)
        try:
            status = "done" if proc.wait(timeout=budget_s) == 0 else "failed"
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            status = "timeout"
    row = _load(out) or {"section": section}
    row.update(wall_s=time.monotonic() - start, budget_s=budget_s)
    if status != "done" or row.get("status") != "done":
        row["status"] = status if status != "done" else row.get("status", "no result")
        row["error"] = _tail(log)
    return row


def _load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _tail(path, lines=12):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def _free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _two_workers(tmp, budget_s):
    """NCCL first; RING, the named fallback, if NCCL is refused or hangs."""
    from tfdist_opt.cluster import tf_config as tf_config_lib  # pylint: disable=g-import-not-at-top

    start, attempts = time.monotonic(), []
    for impl in ("nccl", "ring"):
        left = budget_s - (time.monotonic() - start)
        if left < 20:
            break
        cluster = {"worker": [f"127.0.0.1:{p}" for p in _free_ports(2)]}
        procs = []
        for i in range(2):
            cfg = tf_config_lib.build_tf_config(cluster, "worker", i)
            out = os.path.join(tmp, f"worker_{impl}_{i}.json")
            log = open(os.path.join(tmp, f"worker_{impl}_{i}.log"), "w")
            procs.append((subprocess.Popen(
                _argv("worker", out, f"--worker_all_reduce={impl}"),
                env=_env({"TF_CONFIG": json.dumps(cfg)}), stdout=log,
                stderr=subprocess.STDOUT), out, log))
        # NCCL gets at most half the budget: a hang must leave RING its turn.
        deadline = time.monotonic() + (min(left, budget_s / 2) if impl == "nccl" else left)
        codes = []
        for proc, _, log in procs:
            try:
                codes.append(proc.wait(timeout=max(1.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                codes.append("timeout")
        for proc, _, log in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()
        chief = _load(procs[0][1]) or {}
        attempt = {"all_reduce": impl, "exit_codes": codes}
        if codes == [0, 0] and chief.get("status") == "done":
            attempts.append(attempt)
            row = dict(chief, attempts=attempts, section="two_workers",
                       wall_s=time.monotonic() - start, budget_s=budget_s)
            row["summary"] = dict(chief.get("summary", {}),
                                  two_workers_all_reduce=impl,
                                  two_workers_nccl_accepted=impl == "nccl")
            return row
        attempt["error"] = _first_error(procs[0][2].name) or _first_error(procs[1][2].name)
        attempts.append(attempt)
    return {"section": "two_workers", "status": "failed", "attempts": attempts,
            "wall_s": time.monotonic() - start, "budget_s": budget_s}


def _first_error(path):
    text = _tail(path, 400)
    for key in ("Duplicate GPU", "NCCL", "Error", "error"):
        for line in text.splitlines():
            if key in line:
                return line.strip()[:500]
    return text[-500:]


# --------------------------------------------------------------- sections
_SECTION_BUDGET = flags.DEFINE_float("section_budget_s", 0.0, "Internal.")


def _probe():
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    gpus = []
    for d in tf.config.list_physical_devices("GPU"):
        details = tf.config.experimental.get_device_details(d)
        gpus.append({"name": d.name, "device_name": details.get("device_name"),
                     "compute_capability": details.get("compute_capability")})
    import keras  # pylint: disable=g-import-not-at-top

    _save(_SECTION_OUT.value, {"section": "probe", "status": "done", "environment": {
        "tf": tf.__version__, "keras": keras.__version__,
        "built_with_cuda": tf.test.is_built_with_cuda(),
        "cuda": tf.sysconfig.get_build_info().get("cuda_version"),
        "cudnn": tf.sysconfig.get_build_info().get("cudnn_version"),
        "gpus": gpus, "dry_run_cpu": _DRY.value}})
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

    return max(float(np.abs(x - y).max() / (np.abs(y).max() + 1e-30))
               for x, y in zip(a, b))


def _precision():
    import keras  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    import tfdist_opt  # pylint: disable=g-import-not-at-top

    strategy = tfdist_opt.opt_strategy()
    deadline = time.monotonic() + 0.85 * _SECTION_BUDGET.value
    batch, width, steps = _size(_BATCH), _size(_WIDTH), _size(_STEPS)
    dim = max(16, width // 2)
    x, y = _data(batch * 32, dim, seed=0)
    xt, yt = _data(batch * 4, dim, seed=1)
    data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(batch).prefetch(4)
    keras.utils.set_random_seed(3)
    initial = _mlp(keras, dim, width).get_weights()
    settings = [(p, jit) for jit in (False, True) for p in POLICIES]
    trained = []
    for policy, jit in settings:
        with strategy.scope():
            model = _mlp(keras, dim, width, policy)
            model.set_weights(initial)
            model.compile(keras.optimizers.SGD(0.01, momentum=0.9),
                          keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                          jit_compile=jit)
        model.fit(data, steps_per_epoch=steps, epochs=1, verbose=0)  # trace, compile
        trained.append((model, iter(strategy.experimental_distribute_dataset(data))))
    rows = [{"setting": f"{p} xla={'on' if j else 'off'}", "policy": p, "xla": j,
             "ex_per_s": [], "round_loss": []} for p, j in settings]
    result = {"section": "precision", "status": "running", "plan": _plan(strategy),
              "rows": rows}
    for r in range(_size(_ROUNDS)):
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
        _save(_SECTION_OUT.value, result)
    summary = {}
    for row, (model, _) in zip(rows, trained):
        row["median_ex_per_s"] = statistics.median(row["ex_per_s"])
        row["heldout_loss"] = float(model.evaluate(xt, yt, batch_size=batch, verbose=0))
    for row in rows:
        base = next(r for r in rows if r["policy"] == "float32" and r["xla"] == row["xla"])
        row["heldout_loss_rel_vs_float32"] = (
            abs(row["heldout_loss"] - base["heldout_loss"]) / abs(base["heldout_loss"]))
        row["within_loss_tol"] = row["heldout_loss_rel_vs_float32"] <= LOSS_TOL
        key = f"{row['policy']}_xla_{'on' if row['xla'] else 'off'}"
        summary[f"ex_per_s_{key}"] = row["median_ex_per_s"]
        summary[f"speedup_{key}"] = row["median_ex_per_s"] / rows[0]["median_ex_per_s"]
    result.update(status="done", summary=summary, loss_tol=LOSS_TOL,
                  global_batch=batch, width=width, steps_per_round=steps)
    _save(_SECTION_OUT.value, result)
    return 0


def _plan(strategy):
    return {"strategy": type(strategy).__name__,
            "replicas": strategy.num_replicas_in_sync,
            "devices": list(getattr(strategy.extended, "worker_devices", ()))}


def _limit_gpu(count):
    """GPU 0 as `count` logical devices with memory limits (none on CPU)."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        tf.config.set_logical_device_configuration(gpus[0], [
            tf.config.LogicalDeviceConfiguration(memory_limit=_MEMORY_MB.value)
        ] * count)
    tf.config.experimental.enable_tensor_float_32_execution(False)
    return bool(gpus)


def _worker():
    import keras  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    import tfdist_opt  # pylint: disable=g-import-not-at-top

    _limit_gpu(1)
    strategy = tfdist_opt.opt_strategy(all_reduce=_ALL_REDUCE.value)
    batch, steps, dim, width = _size(_BATCH), _size(_EQUAL_STEPS), 64, 256
    global_batch = batch * strategy.num_replicas_in_sync
    x, y = _data(global_batch * steps, dim, seed=0)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = (
        tf.data.experimental.AutoShardPolicy.DATA)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(global_batch).with_options(options)
    keras.utils.set_random_seed(5)
    initial = _mlp(keras, dim, width).get_weights()

    def fit(scope):
        with scope:
            model = _mlp(keras, dim, width)
            model.set_weights(initial)
            model.compile(keras.optimizers.SGD(0.05),
                          keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        times = []
        stamp = keras.callbacks.LambdaCallback(
            on_train_batch_end=lambda b, logs: times.append(time.perf_counter()))
        model.fit(data, epochs=1, verbose=0, shuffle=False, callbacks=[stamp])
        gaps = [b - a for a, b in zip(times, times[1:])]
        gaps = gaps[min(2, len(gaps) - 1):]  # warm-up steps out, one kept
        return model.get_weights(), global_batch / statistics.median(gaps)

    weights, rate = fit(strategy.scope())
    result = {"section": "two_workers", "status": "running", "plan": _plan(strategy),
              "all_reduce": _ALL_REDUCE.value, "ex_per_s_worker": rate,
              "global_batch": global_batch, "steps": steps}
    _save(_SECTION_OUT.value, result)
    if common.is_chief():
        # One process, the same global batch: plain Keras, no strategy.
        reference, reference_rate = fit(_no_scope())
        diff = _max_rel(weights, reference)
        result["summary"] = {"two_workers_max_rel_vs_one_process": diff,
                             "two_workers_ex_per_s": rate,
                             "one_process_ex_per_s": reference_rate}
        result.update(ok=diff <= EQUAL_TOL, tolerance=EQUAL_TOL)
    result["status"] = "done"
    _save(_SECTION_OUT.value, result)
    return 0


class _no_scope:  # pylint: disable=invalid-name
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def _gradients():
    import keras  # pylint: disable=g-import-not-at-top

    import tfdist_opt  # pylint: disable=g-import-not-at-top
    from tfdist_opt.gradients import keras_binding  # pylint: disable=g-import-not-at-top
    from tfdist_opt.gradients.options import GradientOptions  # pylint: disable=g-import-not-at-top

    on_gpu = _limit_gpu(2)
    strategy = tfdist_opt.opt_strategy(
        fused_updates=False, **({} if on_gpu else {"cpu_replicas": 2}))
    batch, steps = _size(_BATCH), _size(_EQUAL_STEPS)
    global_batch = batch * strategy.num_replicas_in_sync
    x, y = _data(global_batch * steps, 16 * 16 * 3, seed=0)
    x = x.reshape(-1, 16, 16, 3)
    keras.utils.set_random_seed(9)

    def fit(options, optimizer):
        keras_binding.attach(strategy, options)
        keras.utils.set_random_seed(9)
        with strategy.scope():
            model = keras.Sequential([
                keras.Input((16, 16, 3)),
                keras.layers.Conv2D(16, 3, activation="tanh"),
                keras.layers.Flatten(), keras.layers.Dense(10)])
            model.compile(optimizer(), keras.losses.SparseCategoricalCrossentropy(
                from_logits=True))
        model.fit(x, y, batch_size=global_batch, epochs=1, verbose=0, shuffle=False)
        return model.get_weights()

    def sgd():
        return keras.optimizers.SGD(0.05, momentum=0.9)

    def adam():
        return keras.optimizers.Adam(0.01)

    plain = GradientOptions(fused_updates=False)
    psgd = dict(compression="powersgd", powersgd_min_compression=0,
                powersgd_start_step=0, fused_updates=False)
    result = {"section": "gradients", "status": "running", "plan": _plan(strategy)}
    sgd_ref = fit(plain, sgd)
    full = _max_rel(fit(GradientOptions(powersgd_rank=32, **psgd), sgd), sgd_ref)
    rank1 = _max_rel(fit(GradientOptions(powersgd_rank=1, **psgd), sgd), sgd_ref)
    result["powersgd"] = {"full_rank_max_rel": full, "rank1_max_rel": rank1,
                          "tolerance": POWERSGD_TOL}
    _save(_SECTION_OUT.value, result)
    adam_ref = fit(plain, adam)
    zero = _max_rel(fit(GradientOptions(shard_optimizer_state=True, fused_updates=False),
                        adam), adam_ref)
    result["zero1"] = {"max_rel": zero, "tolerance": ZERO_TOL}
    ok = full <= POWERSGD_TOL and rank1 > POWERSGD_TOL and zero <= ZERO_TOL
    result.update(status="done", ok=ok, summary={
        "powersgd_full_rank_max_rel": full, "powersgd_rank1_max_rel": rank1,
        "zero1_max_rel": zero, "gradients_ok": ok})
    _save(_SECTION_OUT.value, result)
    return 0


_SECTION_RUNNERS = {"probe": _probe, "precision": _precision, "worker": _worker,
                    "gradients": _gradients}


if __name__ == "__main__":
    app.run(main)
