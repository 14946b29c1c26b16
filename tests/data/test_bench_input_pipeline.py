"""benchmarks/input_pipeline.py end to end, at tiny sizes, in a subprocess.

The three runs go through the binary's `app.run(main)` one after another in
one subprocess (tests/data/bench_ip_runs.py: one TensorFlow start-up); each
test reads its own run's output and files. Argument rejection runs the binary
itself.
"""

import json
import os
import types

import pytest

from tests.multiworker.harness import REPO_ROOT
from tests.multiworker.harness import run_single

BINARY = os.path.join(REPO_ROOT, "benchmarks", "input_pipeline.py")
DRIVER = os.path.join(REPO_ROOT, "tests", "data", "bench_ip_runs.py")
TINY = [
    "--num_images=256",
    "--num_files=4",
    "--batch_size=32",
    "--steps=3",
    "--warmup_steps=1",
    "--batches_per_step=2",
    "--repeats=1",
    "--epochs=1",
]
RUNS = {  # name: extra flags (each writes <tmp>/<name>.json)
    "throughput": ["--csv={tmp}/ip.csv"],
    "no_cache": ["--cache=none"],
    "input_bound": ["--mode=input_bound"],
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bench_ip")
    argvs = [
        [*TINY, *(f.format(tmp=tmp) for f in flags), f"--output_json={tmp / name}.json"]
        for name, flags in RUNS.items()
    ]
    r = run_single([DRIVER, json.dumps(argvs)], timeout_s=240)
    assert r.returncode == 0, r.output[-3000:]
    return tmp, r.output


def _run(runs, name):
    tmp, output = runs
    i = list(RUNS).index(name)
    part = output.split(f"RUN {i}\n", 1)[1].split(f"EXIT {i} ", 1)
    code = int(part[1].split()[0]) if len(part) > 1 else None
    return types.SimpleNamespace(returncode=code, output=part[0]), tmp


@pytest.mark.slow
def test_throughput_mode_writes_report(runs):
    r, tmp_path = _run(runs, "throughput")
    out = tmp_path / "throughput.json"
    assert r.returncode == 0, r.output[-3000:]
    report = json.loads(out.read_text())
    assert report["benchmark"] == "input_pipeline"
    summary = report["summary"]
    assert set(summary) == {
        "speedup",
        "naive_eps",
        "opt_eps",
        "speedup_no_cache",
        "opt_no_cache_eps",
    }
    assert summary["speedup"] == pytest.approx(summary["opt_eps"] / summary["naive_eps"])
    assert summary["speedup_no_cache"] == pytest.approx(
        summary["opt_no_cache_eps"] / summary["naive_eps"]
    )
    assert report["config"]["num_images"] == 256  # every flag recorded
    assert report["config"]["cache"] == "memory"
    assert [row["pipeline"] for row in report["results"]] == ["naive", "opt", "opt_no_cache"]
    assert "examples/sec: " in r.output and "(jitter = " in r.output
    assert (tmp_path / "ip.csv").exists()
    assert "progress 3/3 (100%) repeat 1/1 opt_no_cache: elapsed " in r.output


@pytest.mark.slow
def test_throughput_mode_without_cache(runs):
    r, tmp_path = _run(runs, "no_cache")
    out = tmp_path / "no_cache.json"
    assert r.returncode == 0, r.output[-3000:]
    report = json.loads(out.read_text())
    assert set(report["summary"]) == {"speedup", "naive_eps", "opt_eps"}
    assert [row["pipeline"] for row in report["results"]] == ["naive", "opt"]


@pytest.mark.slow
def test_input_bound_mode(runs):
    r, tmp_path = _run(runs, "input_bound")
    out = tmp_path / "input_bound.json"
    assert r.returncode == 0, r.output[-3000:]
    report = json.loads(out.read_text())
    summary = report["summary"]
    assert set(summary) == {"input_bound", "real_eps", "synthetic_eps", "real_vs_synthetic"}
    # The verdict follows from the two measured rates (the rows' medians):
    # input-bound when real input runs more than 10 % (the default
    # --input_bound_threshold) slower than synthetic.
    rows = {row["input"]: row for row in report["results"]}
    assert set(rows) == {"real", "synthetic"}
    assert summary["real_eps"] == rows["real"]["median"] > 0
    assert summary["synthetic_eps"] == rows["synthetic"]["median"] > 0
    ratio = rows["real"]["median"] / rows["synthetic"]["median"]
    assert summary["real_vs_synthetic"] == pytest.approx(ratio, rel=1e-12)
    assert summary["input_bound"] == int(ratio < 0.9)
    verdict = "YES" if ratio < 0.9 else "no"
    assert (
        f"input-bound: {verdict} (real input runs at {100 * ratio:.0f}% of synthetic)"
    ) in r.output


def test_extra_arguments_are_rejected():
    r = run_single([BINARY, "stray"], timeout_s=60)
    assert r.returncode != 0 and "Unexpected arguments: stray" in r.output
