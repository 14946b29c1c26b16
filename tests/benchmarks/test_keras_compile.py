"""benchmarks/keras_compile.py: jit_compile and steps_per_execution, alternated."""

import json

from benchmarks.train_lib import compile_compare as keras_compile
from tests.multiworker import harness


def test_settings_differ_only_in_the_compared_option():
    assert keras_compile.compile_kwargs("jit", 0, 8) == {"jit_compile": False}
    assert keras_compile.compile_kwargs("jit", 1, 8) == {"jit_compile": True}
    assert keras_compile.compile_kwargs("steps_per_execution", 0, 8) == {"steps_per_execution": 1}
    assert keras_compile.compile_kwargs("steps_per_execution", 1, 8) == {"steps_per_execution": 8}
    assert keras_compile.steps_per_call("steps_per_execution", 1, 8) == 8
    assert keras_compile.steps_per_call("jit", 1, 8) == 1


def test_two_replicas_report_the_ratio(tmp_path):
    out = tmp_path / "r.json"
    run = harness.run_single(
        [
            "benchmarks/keras_compile.py",
            "--model=mlp",
            "--image_size=4",
            "--batch_size=4",
            "--rounds=2",
            "--steps_per_round=1",
            "--cpu_replicas=2",
            f"--output_json={out}",
        ],
        timeout_s=180,
    )
    assert run.returncode == 0, run.output[-3000:]
    report = json.loads(out.read_text())
    assert report["summary"]["replicas"] == 2
    assert report["summary"]["jit_speedup"] > 0
    assert [r["setting"] for r in report["results"]] == ["jit_compile=False", "jit_compile=True"]
    assert all(len(r["rounds"]) == 2 for r in report["results"])
