r"""Ray backend benchmark: the same training through `launch --ray` vs `launch`.

Runs `benchmarks/train.py` (default `--model=mlp`) as N workers through
`tfdist-opt launch -n N` and through `tfdist-opt launch --ray -n N` (a local
Ray started and stopped for each run, as a user's first `--ray` run does),
alternating which goes first in each round so load changes on a shared host
fall on both alike. Each run's own training throughput comes from its
`--output_json` (`opt_eps`: examples/sec over the timed batches, after
warm-up), so Ray's start-up is not in that figure; it is reported on its own.

    python benchmarks/ray_launch.py --rounds=3 --output_json=/tmp/ray_launch.json

A third setting, `launch_omp1`, is the local launcher with
`OMP_NUM_THREADS=1`, which Ray sets in every 1-CPU worker: it tells how much
of a difference is that setting rather than the engine.

Summary keys: `ray_over_launch` (median over rounds of the per-round ratio
Ray eps / launch eps; the goal is >= 0.95), `ray_over_launch_omp1` (the
same against `launch_omp1`), `launch_eps`, `launch_omp1_eps`, `ray_eps`
(medians), `launch_wall_s`, `ray_wall_s` (median whole-run seconds),
`ray_startup_s` (median seconds for `ray.init` to start the local Ray),
`ray_restart_s` and `launch_restart_s` (seconds from a worker's failing exit
to the restarted worker's first line of Python, one `--max-restarts 1` run
each of a script that exits 1 on its first attempt).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags

if __package__ in (None, ""):  # run as `python benchmarks/ray_launch.py`
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# pylint: disable=g-import-not-at-top
from benchmarks import common
from benchmarks import progress
# pylint: enable=g-import-not-at-top

_ROUNDS = flags.DEFINE_integer("rounds", 3, "Rounds; each runs both backends.")
_WORKERS = flags.DEFINE_integer("workers", 2, "Workers per run.")
_TRAIN_ARGS = flags.DEFINE_string(
    "train_args",
    "--model=mlp --num_batches=60 --num_warmup_batches=10",
    "Arguments for benchmarks/train.py.",
)
_TIMEOUT = flags.DEFINE_float("timeout_s", 600, "Seconds per run.")

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Ray starts each 1-CPU worker with OMP_NUM_THREADS=1 (ray._private.utils:
# "Forcing OMP_NUM_THREADS=1 to avoid performance degradation with many
# workers"); `launch_omp1` is the local launcher with the same setting.
_OMP1 = {"OMP_NUM_THREADS": "1"}
_BACKENDS = ("launch", "ray", "launch_omp1")
_STARTUP_RE = re.compile(r"Ray local instance started in ([0-9.]+) s")
_RESTART_SCRIPT = """
import os, sys, time
attempt = int(os.environ.get("TFDIST_LAUNCH_RESTART_COUNT", "0"))
index = int(os.environ.get("TFDIST_LAUNCH_WORKER_INDEX", "0"))
out = sys.argv[1]
with open(os.path.join(out, f"start-{index}-{attempt}"), "w") as f:
    f.write(repr(time.time()))
if attempt == 0 and index == 0:
    with open(os.path.join(out, "exit-0"), "w") as f:
        f.write(repr(time.time()))
    sys.exit(1)
"""


def _env() -> dict:
    env = dict(
        os.environ,
        RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0",
        RAY_USAGE_STATS_ENABLED="0",
        TF_CPP_MIN_LOG_LEVEL="2",
        PYTHONPATH=_REPO + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    env.pop("TF_CONFIG", None)
    return env


def _launch(ray: bool, workers: int, command: list[str], extra=(), env=None) -> tuple:
    cmd = [
        sys.executable,
        "-m",
        "tfdist_opt",
        "launch",
        *(["--ray"] if ray else []),
        "-n",
        str(workers),
        *extra,
        "--",
        *command,
    ]
    t0 = time.monotonic()
    r = subprocess.run(
        cmd,
        env={**_env(), **(env or {})},
        cwd=_REPO,
        capture_output=True,
        text=True,
        timeout=_TIMEOUT.value,
    )
    wall = time.monotonic() - t0
    if r.returncode not in (0,) and not extra:
        raise RuntimeError(
            f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
        )
    return r, wall


def _train_run(backend: str, tmp: str, tag: str) -> dict:
    ray = backend == "ray"
    out = os.path.join(tmp, f"{tag}.json")
    command = [
        sys.executable,
        "benchmarks/train.py",
        *_TRAIN_ARGS.value.split(),
        f"--output_json={out}",
    ]
    r, wall = _launch(ray, _WORKERS.value, command, env=_OMP1 if backend == "launch_omp1" else None)
    with open(out) as f:
        eps = json.load(f)["summary"]["opt_eps"]
    m = _STARTUP_RE.search(r.stderr)
    return {
        "backend": backend,
        "tag": tag,
        "eps": eps,
        "wall_s": wall,
        "ray_startup_s": float(m.group(1)) if m else None,
    }


def _restart_seconds(ray: bool, tmp: str) -> float:
    d = tempfile.mkdtemp(dir=tmp)
    script = os.path.join(d, "restart.py")
    with open(script, "w") as f:
        f.write(_RESTART_SCRIPT)
    r, _ = _launch(ray, _WORKERS.value, [sys.executable, script, d], extra=("--max-restarts", "1"))
    if r.returncode != 0:
        raise RuntimeError(f"restart run failed ({r.returncode}):\n{r.stderr[-3000:]}")
    read = lambda name: float(open(os.path.join(d, name)).read())
    return read("start-0-1") - read("exit-0")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    rows = []
    n = _ROUNDS.value
    prog = progress.Progress(len(_BACKENDS) * n + 2)
    with tempfile.TemporaryDirectory(prefix="ray_launch_bench_") as tmp:
        for i in range(n):
            order = _BACKENDS[i % 3 :] + _BACKENDS[: i % 3]  # rotate who goes first
            for backend in order:
                rows.append(dict(_train_run(backend, tmp, f"r{i}_{backend}"), round=i))
                prog.done(f"round {i + 1}/{n} {backend}")
        restart = {}
        for ray in (False, True):
            restart["ray" if ray else "launch"] = _restart_seconds(ray, tmp)
            prog.done(f"restart {'ray' if ray else 'launch'}")
    by = lambda b, k: [r[k] for r in rows if r["backend"] == b]
    eps = lambda i, b: next(r["eps"] for r in rows if r["round"] == i and r["backend"] == b)
    ratios = [eps(i, "ray") / eps(i, "launch") for i in range(n)]
    ratios_omp1 = [eps(i, "ray") / eps(i, "launch_omp1") for i in range(n)]
    summary = {
        "ray_over_launch": statistics.median(ratios),
        "ray_over_launch_per_round": ratios,
        "ray_over_launch_omp1": statistics.median(ratios_omp1),
        "ray_over_launch_omp1_per_round": ratios_omp1,
        "launch_eps": statistics.median(by("launch", "eps")),
        "launch_omp1_eps": statistics.median(by("launch_omp1", "eps")),
        "ray_eps": statistics.median(by("ray", "eps")),
        "launch_wall_s": statistics.median(by("launch", "wall_s")),
        "ray_wall_s": statistics.median(by("ray", "wall_s")),
        "ray_startup_s": statistics.median(
            [s for s in by("ray", "ray_startup_s") if s is not None] or [0.0]
        ),
        "ray_restart_s": restart["ray"],
        "launch_restart_s": restart["launch"],
    }
    print(json.dumps(summary, indent=1))
    common.write_report(
        "ray_launch", common.flag_config(), rows, summary, output_json=common.OUTPUT_JSON.value
    )


if __name__ == "__main__":
    app.run(main)
