"""The README's main job (tfdist_opt.examples.train_cnn) under the launcher."""

import json
import subprocess
import sys

import pytest

from tests.multiworker.harness import REPO_ROOT

pytestmark = pytest.mark.multiworker


def test_main_job_trains_on_two_workers_with_identical_weights():
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "tfdist_opt",
            "launch",
            "-n",
            "2",
            "--",
            sys.executable,
            "-m",
            "tfdist_opt.examples.train_cnn",
            "--epochs",
            "2",
            "--examples",
            "1024",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
    results = [
        json.loads(line.split("RESULT ", 1)[1])
        for line in p.stdout.splitlines()
        if "RESULT " in line
    ]
    assert sorted(r["task"] for r in results) == ["worker:0", "worker:1"]
    assert {r["replicas"] for r in results} == {2}
    assert len({r["weights_sha256"] for r in results}) == 1
    assert results[0]["loss"][-1] < results[0]["loss"][0]
    assert results[0]["throughput"]["examples_per_sec"] > 0
    # Quiet by default: the README and docs/get-started/index.md promise about 20 lines, result easy
    # to find (3 epochs there; 2 here).
    lines = (p.stdout + p.stderr).splitlines()
    assert len(lines) <= 30, "\n".join(lines)
    assert not [ln for ln in lines if "] I0000 " in ln or "absl::InitializeLog" in ln]
    assert any(ln.startswith("[launch] all 2 workers joined") for ln in lines)
