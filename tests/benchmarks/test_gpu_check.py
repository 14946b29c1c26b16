"""benchmarks/gpu_check.py: the prepared GPU check, run where no GPU is.

* Without a GPU (this pytest run hides GPUs) it prints one line saying so
  and exits 0; where the driver lists a GPU that TensorFlow cannot use (a
  stand-in `nvidia-smi`), it says so and exits 1.
* `--dry_run_cpu` runs every section's code on CPU with tiny sizes: 6
  precision settings with losses side by side, 2 workers whose NCCL attempt
  is refused (no GPU) and whose named fallback RING trains weights equal to
  one process's, and PowerSGD / ZeRO-1 equal to their references.
"""

import json
import os
import subprocess
import sys

import pytest

from benchmarks import gpu_check_sections as sections
from tests.multiworker import harness


def test_without_a_gpu_one_line_and_status_0(tmp_path):
    out = tmp_path / "r.json"
    # The real interpreter, as a user starts it (a warm fork's own set-up
    # touches TensorFlow's devices, which prints a cuInit line here).
    run = harness.run_single(
        ["benchmarks/gpu_check.py", f"--output_json={out}"],
        timeout_s=180,
        extra_env={"CUDA_VISIBLE_DEVICES": "-1"},
        warm=False,
    )
    assert run.returncode == 0, run.output[-3000:]
    lines = run.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(sections.NO_GPU), run.output
    assert "nothing to check" in lines[0]
    report = json.loads(out.read_text())
    assert report["summary"] == {"gpus": 0, "checked": False}
    # Like every benchmark's report: the commit, resolved StrategyConfig, machine.
    assert {"commit", "strategy_config", "machine"} <= set(report["provenance"])


def test_a_driver_gpu_tensorflow_cannot_use_fails_by_name(tmp_path):
    # A stand-in `nvidia-smi` lists one GPU; TensorFlow here sees none.
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)'\n")
    smi.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "TF_CONFIG")}
    env.update(
        PATH=f"{smi.parent}{os.pathsep}{env['PATH']}",
        TF_CPP_MIN_LOG_LEVEL="2",
        PYTHONPATH=harness.REPO_ROOT + os.pathsep + env.get("PYTHONPATH", ""),
    )
    p = subprocess.run(
        [sys.executable, "benchmarks/gpu_check.py"],
        env=env,
        cwd=harness.REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert p.returncode == 1, p.stdout + p.stderr[-3000:]
    assert p.stdout.startswith("gpu_check: the NVIDIA driver lists 1 GPU(s) but TensorFlow "), (
        p.stdout
    )
    assert "sees none: its CUDA libraries are missing" in p.stdout


@pytest.mark.multiworker
@pytest.mark.slow
def test_dry_run_on_cpu_runs_every_section(tmp_path):
    out = tmp_path / "r.json"
    # The sections' budgets are sized for a GPU; on a CPU host under load the
    # dry run took 100 to 340 s of wall time (about 30 CPU-seconds).
    run = harness.run_single(
        ["benchmarks/gpu_check.py", "--dry_run_cpu", "--budget_s=1200", f"--output_json={out}"],
        timeout_s=1500,
    )
    assert run.returncode == 0, run.output[-3000:]
    assert "all checks passed (dry run on CPU)" in run.output
    report = json.loads(out.read_text())
    ran = {r["section"]: r for r in report["results"]}
    assert {k: r["status"] for k, r in ran.items()} == {
        "precision": "done",
        "two_workers": "done",
        "gradients": "done",
    }
    rows = ran["precision"]["rows"]
    assert [r["setting"] for r in rows] == [
        f"{p} xla={x}" for x in ("off", "on") for p in sections.POLICIES
    ]
    assert all(len(r["round_loss"]) == 2 and r["median_ex_per_s"] > 0 for r in rows)
    two = ran["two_workers"]
    assert [a["all_reduce"] for a in two["attempts"]] == ["nccl", "ring"]
    assert "NCCL needs GPUs" in two["attempts"][0]["error"]
    s = report["summary"]
    assert s["two_workers_all_reduce"] == "ring" and not s["two_workers_nccl_accepted"]
    assert s["two_workers_max_rel_vs_one_process"] <= sections.EQUAL_TOL
    assert s["powersgd_full_rank_max_rel"] <= sections.POWERSGD_TOL
    assert s["powersgd_rank1_max_rel"] > sections.POWERSGD_TOL
    assert s["zero1_max_rel"] <= sections.ZERO_TOL
    assert s["failed_sections"] == []
