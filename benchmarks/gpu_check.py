r"""The prepared GPU check: what must hold on a GPU, in one command (<= 8 min).

    python benchmarks/gpu_check.py --output_json=benchmarks/results/gpu_check_h100.json

Sections, each in a process of its own with a time budget (a section out of
time is killed and named; the JSON is rewritten after every section, and each
section rewrites its own part after every round, so a cut run keeps what ran):

1. `probe`: TensorFlow's version, whether it was built with CUDA, the GPUs.
   No GPU: one line saying so, exit status 0. Every section runs on one GPU
   (`CUDA_VISIBLE_DEVICES=0` unless it is set).
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
   `POWERSGD_TOL`, ZeRO-1 (`shard_optimizer_state`, Adam with epsilon 1e-3)
   equals unsharded Adam within `ZERO_TOL`, and PowerSGD at rank 1 differs
   by more than `POWERSGD_TOL` (the comparison can fail).

The sections that compare weights turn TF32 off
(`tf.config.experimental.enable_tensor_float_32_execution(False)`): with
it, float32 matmuls on Ampere and later round inputs to 10 mantissa bits and
a different batch split changes the digits. Tolerances are max |w - w_ref|
over max |w_ref|, per weight, after all steps (the constants in
`benchmarks/gpu_check_sections.py`, where the sections' code lives). The
exit status is 1 when a comparison fails or a section does not finish.
`--budget_s` (420 s) is shared by the sections (35 / 40 / 25 %; the probe
has 90 s of its own): with process starts, about 8 minutes in all.

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
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags

if __package__ in (None, ""):  # run as `python benchmarks/gpu_check.py`
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import common  # pylint: disable=g-import-not-at-top
from benchmarks import gpu_check_sections as sections  # pylint: disable=g-import-not-at-top

NO_GPU = sections.NO_GPU
SECTIONS = {"precision": 0.35, "two_workers": 0.40, "gradients": 0.25}

_DRY = flags.DEFINE_boolean(
    "dry_run_cpu",
    False,
    "Run every section on CPU with tiny sizes (GPUs hidden): exercises the script where no GPU is.",
)
_BUDGET = flags.DEFINE_float(
    "budget_s",
    420.0,
    "Seconds for the sections together (probe apart), "
    "shared " + ", ".join(f"{k} {v:.0%}" for k, v in SECTIONS.items()) + ".",
)
_BATCH = flags.DEFINE_integer("batch_size", 1024, "Batch per replica.")
_WIDTH = flags.DEFINE_integer("width", 4096, "MLP width (precision section).")
_ROUNDS = flags.DEFINE_integer("rounds", 6, "Interleaved rounds (precision).")
_STEPS = flags.DEFINE_integer("steps_per_round", 50, "Steps per setting per round.")
_EQUAL_STEPS = flags.DEFINE_integer(
    "equal_steps", 30, "Steps trained before weights are compared (two_workers, gradients)."
)
_MEMORY_MB = flags.DEFINE_integer(
    "logical_memory_mb", 8192, "Memory limit of each logical GPU device."
)
_SECTION = flags.DEFINE_string("section", None, "Internal: run one section here.")
_SECTION_OUT = flags.DEFINE_string("section_out", None, "Internal: the section's JSON.")
_ALL_REDUCE = flags.DEFINE_string("worker_all_reduce", "nccl", "Internal: two_workers.")
_SECTION_BUDGET = flags.DEFINE_float("section_budget_s", 0.0, "Internal.")

_FORWARDED = (_DRY, _BATCH, _WIDTH, _ROUNDS, _STEPS, _EQUAL_STEPS, _MEMORY_MB)
_DRY_SIZES = {"batch_size": 8, "width": 32, "rounds": 2, "steps_per_round": 2, "equal_steps": 3}


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
        return sections.RUNNERS[_SECTION.value](
            sections.SectionOptions(
                out=_SECTION_OUT.value,
                dry_run_cpu=_DRY.value,
                batch_size=_size(_BATCH),
                width=_size(_WIDTH),
                rounds=_size(_ROUNDS),
                steps_per_round=_size(_STEPS),
                equal_steps=_size(_EQUAL_STEPS),
                logical_memory_mb=_MEMORY_MB.value,
                budget_s=_SECTION_BUDGET.value,
                all_reduce=_ALL_REDUCE.value,
            )
        )
    return _orchestrate()


def _orchestrate() -> int:
    """Runs each section in a child (this process never starts TF's runtime)."""
    tmp = tempfile.mkdtemp(prefix="gpu_check_")
    report = {
        "benchmark": "gpu_check",
        "config": common.flag_config(),
        "environment": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "load_avg_1m": os.getloadavg()[0],
        },
        "provenance": common.provenance(),
        "results": [],
        "summary": {},
    }
    probe = _child("probe", tmp, 90)
    if probe.get("status") != "done":
        print(f"gpu_check: the probe failed: {probe.get('error')}", flush=True)
        return 1
    report["environment"].update(probe["environment"])
    if not probe["environment"]["gpus"] and not _DRY.value:
        driver = _driver_gpus()
        report["environment"]["driver_gpus"] = driver
        report["summary"] = {"gpus": 0, "checked": False}
        _write(report)
        shutil.rmtree(tmp, ignore_errors=True)
        tf_line = (
            f"TensorFlow {probe['environment']['tf']} (built with CUDA: "
            f"{probe['environment']['built_with_cuda']})"
        )
        if driver and "CUDA_VISIBLE_DEVICES" not in os.environ:
            # A GPU TensorFlow cannot use is a failed check, not "no GPU".
            print(
                f"gpu_check: the NVIDIA driver lists {len(driver)} GPU(s) but "
                f"{tf_line} sees none: its CUDA libraries are missing (pip "
                'install "tensorflow[and-cuda]" at this TensorFlow\'s version).',
                flush=True,
            )
            return 1
        print(
            f"{NO_GPU} {tf_line[len('TensorFlow ') :]}; nothing to check "
            "(--dry_run_cpu runs the same code on CPU).",
            flush=True,
        )
        return 0
    failed = []
    for name, share in SECTIONS.items():
        budget = max(60.0, share * _BUDGET.value)
        row = _two_workers(tmp, budget) if name == "two_workers" else _child(name, tmp, budget)
        report["results"].append(row)
        report["summary"].update(row.get("summary", {}))
        _write(report)
        print(
            f"{name}: {row.get('status')} in {row.get('wall_s', 0):.0f} s; "
            + json.dumps(row.get("summary", {})),
            flush=True,
        )
        if row.get("status") != "done" or row.get("ok") is False:
            failed.append(name)
    report["summary"]["failed_sections"] = failed
    _write(report)
    if failed:
        print(f"gpu_check: FAILED: {', '.join(failed)} (logs in {tmp})", flush=True)
        return 1
    shutil.rmtree(tmp, ignore_errors=True)
    print("gpu_check: all checks passed" + (" (dry run on CPU)" if _DRY.value else ""), flush=True)
    return 0


def _driver_gpus():
    """The GPUs `nvidia-smi -L` lists (none without the NVIDIA driver)."""
    if not shutil.which("nvidia-smi"):
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in out.splitlines() if line.startswith("GPU ")]


def _write(report):
    path = common.OUTPUT_JSON.value
    if path:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        sections.save(path, report)


def _env(extra=None):
    from tfdist_opt.launch import log_filter  # pylint: disable=g-import-not-at-top

    env, _ = log_filter.quiet_env(os.environ)
    env.pop("TF_CONFIG", None)
    if _DRY.value:
        env["CUDA_VISIBLE_DEVICES"] = "-1"
    elif "CUDA_VISIBLE_DEVICES" not in env:
        # Every section is about one GPU, also on a host with several.
        env["CUDA_VISIBLE_DEVICES"] = "0"
    env.update(extra or {})
    return env


def _argv(section, out, *extra):
    args = [
        sys.executable,
        os.path.abspath(__file__),
        f"--section={section}",
        f"--section_out={out}",
    ]
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
            env=_env(extra_env),
            stdout=f,
            stderr=subprocess.STDOUT,
        )
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
            procs.append(
                (
                    subprocess.Popen(
                        _argv("worker", out, f"--worker_all_reduce={impl}"),
                        env=_env({"TF_CONFIG": json.dumps(cfg)}),
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    ),
                    out,
                    log,
                )
            )
        # NCCL gets at most half the budget: a hang must leave RING its turn.
        deadline = time.monotonic() + (min(left, budget_s / 2) if impl == "nccl" else left)
        codes = []
        for proc, _, _log in procs:
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
            row = dict(
                chief,
                attempts=attempts,
                section="two_workers",
                wall_s=time.monotonic() - start,
                budget_s=budget_s,
            )
            row["summary"] = dict(
                chief.get("summary", {}),
                two_workers_all_reduce=impl,
                two_workers_nccl_accepted=impl == "nccl",
            )
            return row
        attempt["error"] = _first_error(procs[0][2].name) or _first_error(procs[1][2].name)
        attempts.append(attempt)
    return {
        "section": "two_workers",
        "status": "failed",
        "attempts": attempts,
        "wall_s": time.monotonic() - start,
        "budget_s": budget_s,
    }


def _first_error(path):
    text = _tail(path, 400)
    for key in ("Duplicate GPU", "NCCL", "Error", "error"):
        for line in text.splitlines():
            if key in line:
                return line.strip()[:500]
    return text[-500:]


if __name__ == "__main__":
    app.run(main)
