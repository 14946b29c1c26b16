r"""Sharded vs unsharded optimizer state (ZeRO stage 1): memory and speed.

    python benchmarks/memory.py --output_json=benchmarks/results/memory_2workers.json

The driver (this binary without `--role`) starts two local clusters of
`--workers` workers in turn with `tfdist-opt launch`, same model and data:
`unsharded` (`opt_strategy()`) and `sharded`
(`opt_strategy(shard_optimizer_state=True)`). The model is an MLP of
`--width` x `--depth` Dense layers (default 25.2M parameters), Adam,
`--steps` steps of `--batch_size` examples per worker (the first
`--warmup` steps are not timed), so the step is dominated by the gradient
all-reduce (comm-bound).

Each worker reports: its peak resident memory (`ru_maxrss`, the whole
process life), its resident memory after building the model and before the
optimizer is built (the baseline), its resident memory after the warm-up
steps (`rss_after_warmup_bytes`: steady state, every buffer allocated once)
and the peak over the timed steps only (`steady_peak_rss_bytes`: Linux's
VmHWM, reset after the warm-up by writing 5 to /proc/self/clear_refs), the peak device memory on a GPU
(`tf.config.experimental.get_memory_info`), the optimizer-state bytes one
replica holds (`sharded_state.state_bytes_per_replica`: its local copy of
every optimizer variable), and examples/sec.

Summary keys: `state_bytes_ratio` (sharded / unsharded optimizer-state
bytes per replica; goal <= 1/n + 0.01), `state_bytes_saved`,
`peak_rss_saved_bytes` (unsharded - sharded peak RSS of the same task,
the worst task),
`rss_saved_over_state_saved` (goal >= 0.75), the same for the steady
state (`steady_rss_saved_bytes`, `steady_peak_rss_saved_bytes`), `examples_per_sec_unsharded`,
`examples_per_sec_sharded`, `slowdown` (1 - sharded / unsharded; goal <=
0.10).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags

if __package__ in (None, ""):  # run as `python benchmarks/memory.py`
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import common  # pylint: disable=g-import-not-at-top
from benchmarks.memory_summary import summarize  # pylint: disable=g-import-not-at-top
from tfdist_opt.gradients.stages import builtin_stages  # pylint: disable=g-import-not-at-top

_ROLE = flags.DEFINE_enum(
    "role", None, ["unsharded", "sharded"], "Internal: which run this process belongs to."
)
_PART_DIR = flags.DEFINE_string("part_dir", None, "Internal: where workers write.")
_WORKERS = flags.DEFINE_integer("workers", 2, "Worker tasks in each run.")
_WIDTH = flags.DEFINE_integer("width", 4096, "Hidden width.")
_IN = flags.DEFINE_integer("input_dim", 1024, "Input and output width.")
_DEPTH = flags.DEFINE_integer("depth", 1, "Hidden width x width layers.")
_BATCH = flags.DEFINE_integer("batch_size", 16, "Examples per worker step.")
_STEPS = flags.DEFINE_integer("steps", 8, "Training steps per run.")
_WARMUP = flags.DEFINE_integer("warmup", 3, "Untimed first steps.")
_REPEATS = flags.DEFINE_integer(
    "repeats", 1, "Alternate unsharded and sharded runs this many times."
)
_MMAP = flags.DEFINE_integer(
    "malloc_mmap_threshold",
    0,
    "If > 0, set glibc's MALLOC_MMAP_THRESHOLD_ (bytes) in the workers: "
    "buffers above it are mmapped and given back to the OS when freed, so "
    "RSS follows live memory instead of glibc's high-water mark (0: the "
    "default, a dynamic threshold that grows up to 32 MiB).",
)
_TRIM = flags.DEFINE_bool(
    "malloc_trim",
    False,
    "Call glibc's malloc_trim(0) in the workers before and after every step "
    "(gives the heap's free pages back to the OS; does RSS then follow?).",
)
_SETTINGS = flags.DEFINE_list(
    "settings",
    ["unsharded", "sharded"],
    "Which runs to make (a summary needs both).",
)
_BFC = flags.DEFINE_bool(
    "tf_bfc",
    False,
    "Run the workers with TF_CPU_ALLOCATOR_USE_BFC=true and report TF's own "
    "allocator peaks (`tf_peak_bytes`, `tf_steady_peak_bytes`: the bytes of "
    "live tensors and variables, without the C library's free lists).",
)
_TIMEOUT = flags.DEFINE_integer("run_timeout_s", 900, "Wall-clock limit per run.")
_GATHER = flags.DEFINE_integer(
    "shard_bucket_bytes",
    builtin_stages.ZERO_BUCKET_BYTES,
    "The sharded run's `shard_bucket_bytes` (bound on one gather bucket of "
    "updated shards; 0: one bucket per dtype).",
)


def num_params(input_dim, width, depth):
    """Parameters of the MLP (weights + biases)."""
    return (input_dim + 1) * width + depth * (width + 1) * width + (width + 1) * input_dim


def _rss_now() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _peak_rss_since_reset() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def _malloc_trim():
    import ctypes  # pylint: disable=g-import-not-at-top

    libc = ctypes.CDLL("libc.so.6")
    return lambda: libc.malloc_trim(0)


def run_role(role):
    import keras  # pylint: disable=g-import-not-at-top
    import numpy as np  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    from tfdist_opt.gradients.zero import sharded_state  # pylint: disable=g-import-not-at-top
    from tfdist_opt.strategy import opt_strategy  # pylint: disable=g-import-not-at-top

    strategy = (
        opt_strategy(shard_optimizer_state=True, shard_bucket_bytes=_GATHER.value)
        if role == "sharded"
        else opt_strategy()
    )
    n = strategy.num_replicas_in_sync
    with strategy.scope():
        layers = [keras.Input((_IN.value,))]
        layers += [
            keras.layers.Dense(_WIDTH.value, activation="relu") for _ in range(_DEPTH.value + 1)
        ]
        layers.append(keras.layers.Dense(_IN.value))
        model = keras.Sequential(layers)
        model.compile(keras.optimizers.Adam(1e-4), "mse")
        baseline_rss = _rss_now()
        model.optimizer.build(model.trainable_variables)
    state_bytes = sharded_state.state_bytes_per_replica(model.optimizer)
    global_batch = _BATCH.value * n
    rng = np.random.default_rng(0)
    x = rng.normal(size=(global_batch, _IN.value)).astype("float32")
    ds = tf.data.Dataset.from_tensors((x, x)).repeat()
    opts = tf.data.Options()
    opts.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    times = []
    mem = {}
    bfc = os.environ.get("TF_CPU_ALLOCATOR_USE_BFC") == "true"

    trim = _malloc_trim() if _TRIM.value else (lambda: None)

    class StepTimer(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            trim()
            self.t0 = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            times.append(time.perf_counter() - self.t0)
            trim()
            if len(times) == _WARMUP.value:
                mem["rss_after_warmup_bytes"] = _rss_now()
                mem["peak_reset"] = _reset_peak_rss()
                if bfc:
                    mem["tf_peak_bytes"] = tf.config.experimental.get_memory_info("CPU:0")["peak"]
                    tf.config.experimental.reset_memory_stats("CPU:0")

    model.fit(
        ds.with_options(opts),
        epochs=1,
        steps_per_epoch=_STEPS.value,
        verbose=0,
        callbacks=[StepTimer()],
    )
    measured = times[_WARMUP.value :] or times
    if mem.pop("peak_reset", False):
        mem["steady_peak_rss_bytes"] = _peak_rss_since_reset()
    mem["rss_end_bytes"] = _rss_now()
    if bfc:
        mem["tf_steady_peak_bytes"] = tf.config.experimental.get_memory_info("CPU:0")["peak"]
    row = {
        "setting": role,
        "task": json_task_index(),
        "replicas": n,
        "params": model.count_params(),
        "optimizer_state_bytes_per_replica": state_bytes,
        "baseline_rss_bytes": baseline_rss,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "examples_per_sec": global_batch * len(measured) / sum(measured),
        "step_times_s": times,
        **mem,
    }
    if tf.config.list_physical_devices("GPU"):
        row["gpu_peak_bytes"] = tf.config.experimental.get_memory_info("GPU:0")["peak"]
    task = json_task_index()
    with open(os.path.join(_PART_DIR.value, f"{role}_{task}.json"), "w") as f:
        json.dump(row, f)
    sys.stdout.flush()
    os._exit(0)  # MWMS cannot be shut down cleanly in-process


def json_task_index() -> int:
    tf_config = json.loads(os.environ.get("TF_CONFIG", "{}") or "{}")
    return int(tf_config.get("task", {}).get("index", 0))


def _launch(role, part_dir, repeat=0):
    passthrough = [
        f"--{f.name}={f.value}"
        for f in (_WORKERS, _WIDTH, _IN, _DEPTH, _BATCH, _STEPS, _WARMUP, _GATHER, _TRIM)
    ]
    cmd = [
        sys.executable,
        "-m",
        "tfdist_opt",
        "launch",
        "--workers",
        str(_WORKERS.value),
        "--",
        sys.executable,
        os.path.abspath(__file__),
        f"--role={role}",
        f"--part_dir={part_dir}",
        *passthrough,
    ]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_CONFIG", None)
    if _BFC.value:
        env["TF_CPU_ALLOCATOR_USE_BFC"] = "true"
    if _MMAP.value > 0:
        env["MALLOC_MMAP_THRESHOLD_"] = str(_MMAP.value)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = repo + os.pathsep + env.get("PYTHONPATH", "")
    load = os.getloadavg()[0]  # the shared host's load when this run starts
    proc = subprocess.run(
        cmd, env=env, timeout=_TIMEOUT.value, capture_output=True, text=True, check=False
    )
    rows = []
    for task in range(_WORKERS.value):
        path = os.path.join(part_dir, f"{role}_{task}.json")
        if not os.path.exists(path):
            raise RuntimeError(
                f"the {role} run failed (exit {proc.returncode}):\n" + proc.stderr[-4000:]
            )
        final = os.path.join(part_dir, f"{role}_{task}_r{repeat}.json")
        os.replace(path, final)
        path = final
        if not os.path.exists(path):
            raise RuntimeError(
                f"the {role} run failed (exit {proc.returncode}):\n" + proc.stderr[-4000:]
            )
        with open(path) as f:
            rows.append(dict(json.load(f), repeat=repeat, load_1min=load))
    return rows


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    if _ROLE.value is not None:
        run_role(_ROLE.value)
        return
    with tempfile.TemporaryDirectory() as tmp:
        rows = [
            r
            for rep in range(_REPEATS.value)
            for role in _SETTINGS.value
            for r in _launch(role, tmp, rep)
        ]
    if set(_SETTINGS.value) != {"unsharded", "sharded"}:
        for r in rows:
            print(json.dumps({k: v for k, v in r.items() if k != "step_times_s"}))
        return
    summary = summarize(rows, _WORKERS.value)
    common.write_report(
        "memory",
        common.flag_config(),
        rows,
        summary,
        output_json=common.OUTPUT_JSON.value,
        csv_path=common.CSV.value,
    )
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    app.run(main)
