"""benchmarks/input_pipeline.py end to end, at tiny sizes, in a subprocess."""

import json
import os

import pytest

from tests.multiworker.harness import REPO_ROOT
from tests.multiworker.harness import run_single

BINARY = os.path.join(REPO_ROOT, "benchmarks", "input_pipeline.py")
TINY = ["--num_images=256", "--num_files=4", "--batch_size=32", "--steps=3",
        "--warmup_steps=1", "--batches_per_step=2", "--repeats=1", "--epochs=1"]


@pytest.mark.slow
def test_throughput_mode_writes_report(tmp_path):
    out = tmp_path / "ip.json"
    r = run_single([BINARY, *TINY, f"--output_json={out}",
                    f"--csv={tmp_path / 'ip.csv'}"], timeout_s=120)
    assert r.returncode == 0, r.output[-3000:]
    report = json.loads(out.read_text())
    assert report["benchmark"] == "input_pipeline"
    summary = report["summary"]
    assert set(summary) == {"speedup", "naive_eps", "opt_eps",
                            "speedup_no_cache", "opt_no_cache_eps"}
    assert summary["speedup"] == pytest.approx(summary["opt_eps"] / summary["naive_eps"])
    assert summary["speedup_no_cache"] == pytest.approx(
        summary["opt_no_cache_eps"] / summary["naive_eps"])
    assert report["config"]["num_images"] == 256  # every flag recorded
    assert report["config"]["cache"] == "memory"
    assert [row["pipeline"] for row in report["results"]] == [
        "naive", "opt", "opt_no_cache"]
    assert "examples/sec: " in r.output and "(jitter = " in r.output
    assert (tmp_path / "ip.csv").exists()
    assert "progress 3/3 (100%) repeat 1/1 opt_no_cache: elapsed " in r.output


@pytest.mark.slow
def test_throughput_mode_without_cache(tmp_path):
    out = tmp_path / "ip.json"
    r = run_single([BINARY, *TINY, "--cache=none", f"--output_json={out}"],
                   timeout_s=120)
    assert r.returncode == 0, r.output[-3000:]
    report = json.loads(out.read_text())
    assert set(report["summary"]) == {"speedup", "naive_eps", "opt_eps"}
    assert [row["pipeline"] for row in report["results"]] == ["naive", "opt"]


@pytest.mark.slow
def test_input_bound_mode(tmp_path):
    out = tmp_path / "ib.json"
    r = run_single([BINARY, *TINY, "--mode=input_bound", f"--output_json={out}"],
                   timeout_s=120)
    assert r.returncode == 0, r.output[-3000:]
    summary = json.loads(out.read_text())["summary"]
    assert set(summary) == {"input_bound", "real_eps", "synthetic_eps",
                            "real_vs_synthetic"}
    assert summary["input_bound"] in (0, 1)


def test_extra_arguments_are_rejected():
    r = run_single([BINARY, "stray"], timeout_s=60)
    assert r.returncode != 0 and "Unexpected arguments: stray" in r.output
