"""benchmarks/model_parallel.py end to end, at tiny sizes, in a subprocess."""

import json
import os

import pytest

from tests.multiworker.harness import REPO_ROOT
from tests.multiworker.harness import run_single

BINARY = os.path.join(REPO_ROOT, "benchmarks", "model_parallel.py")


@pytest.mark.slow
def test_writes_report_with_the_issue_keys(tmp_path):
    out = tmp_path / "mp.json"
    r = run_single(
        [
            BINARY,
            "--layers=6",
            "--width=32",
            "--batch_size=16",
            "--steps=2",
            "--warmup_steps=1",
            "--repeats=1",
            "--micro_batches=1,4",
            f"--output_json={out}",
            f"--csv={tmp_path / 'mp.csv'}",
        ],
        timeout_s=180,
    )
    assert r.returncode == 0, r.output[-3000:]
    report = json.loads(out.read_text())
    assert report["benchmark"] == "model_parallel"
    summary = report["summary"]
    assert summary["stages"] == 2
    # 6 layers of 32 units: the cut is balanced to within one layer.
    assert 0.5 <= summary["largest_stage_fraction"] <= summary["largest_stage_goal"]
    for m in (1, 4):
        assert summary[f"speedup_m{m}"] == pytest.approx(
            summary[f"pipeline_m{m}_eps"] / summary["one_device_eps"]
        )
    byte_rows = [row for row in report["results"] if "bytes" in row]
    assert [row["device"] for row in byte_rows] == ["/CPU:0", "/CPU:1"]
    assert all(row["slot_bytes"] == 2 * row["param_bytes"] > 0 for row in byte_rows)
    assert report["config"]["micro_batches"] == ["1", "4"]
    assert "examples/sec: " in r.output and (tmp_path / "mp.csv").exists()


def test_extra_arguments_are_rejected():
    r = run_single([BINARY, "stray"], timeout_s=60)
    assert r.returncode != 0 and "Unexpected arguments: stray" in r.output
