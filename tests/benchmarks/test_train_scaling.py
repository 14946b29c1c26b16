"""`benchmarks/train.py --compare=scaling` and `--metrics`.

The coordinator alternates ours on N workers with one process on the same
cores at the same global batch (stand-in launcher: which processes, which
flags and environment each gets); one real run under `tfdist-opt launch -n 2`
checks the one process trained the same model and global batch with the same
metrics, and that the summary is ours over it.
"""

import json
import os
import types

import pytest
from absl import flags

from benchmarks.train_lib import peer_compare
from tfdist_opt.launch import local as launcher
from tests.multiworker.harness import REPO_ROOT
from tests.multiworker.harness import python
from tests.multiworker.harness import run_single

BINARY = os.path.join(REPO_ROOT, "benchmarks", "train.py")


def test_scaling_roles_keep_the_global_batch_on_one_process():
    ours, one = peer_compare.roles_for("scaling", 3, 8)
    assert (ours.name, ours.workers, ours.extra_flags) == ("ours", 3, ())
    assert (one.name, one.peer_role, one.workers) == ("one_process", "ours", 1)
    assert one.extra_flags == ("--batch_size=24",) and not one.strategy_flags
    with pytest.raises(ValueError, match="Unrecognized comparison: 'nope'"):
        peer_compare.roles_for("nope", 2, 8)


def test_summary_and_round_spread():
    s = peer_compare.scaling_summary({"ours": 150.0, "one_process": 200.0})
    assert s == {"opt_eps": 150.0, "one_process_eps": 200.0, "fraction_of_one_process": 0.75}
    assert peer_compare.round_spread([50.0, 100.0, 80.0]) == 0.5
    assert peer_compare.round_spread([]) is None


def test_one_process_gets_no_strategy_flags_nor_env(monkeypatch):
    calls = []

    def fake_run_local(argv, n, *, env, stdout, stderr, startup_timeout):
        del stdout, stderr, startup_timeout
        out = [a for a in argv if a.startswith("--output_json=")][0].split("=", 1)[1]
        calls.append((n, argv, env))
        base = 0.1 if n == 2 else 0.08
        row = {
            "setting": "opt",
            "median": 8 / base,
            "global_batch": 8,
            "window_batches": 1,
            "window_durations_s": [base, base],
            "wall_s": 1.0,
        }
        with open(out, "w") as f:
            json.dump({"results": [row], "environment": {"load_avg_1m": 1.0}}, f)
        return types.SimpleNamespace(returncode=0, message="ok")

    monkeypatch.setattr(launcher, "run_local", fake_run_local)
    monkeypatch.delenv("TF_CONFIG", raising=False)
    monkeypatch.setenv("TFDIST_OPT_COMPRESSION", "bf16")
    # The binary's flags that matter here, in their own FlagValues (importing
    # benchmarks/train.py would define them process-wide).
    fv = flags.FlagValues()
    flags.DEFINE_string("compression", None, "", flag_values=fv)
    flags.DEFINE_integer("batch_size", 32, "", flag_values=fv)
    flags.DEFINE_list("metrics", [], "", flag_values=fv)
    flags.DEFINE_string("model", "cnn_small", "", flag_values=fv)
    fv(["train", "--compression=bf16", "--batch_size=4", "--metrics=accuracy", "--model=mlp"])
    args = types.SimpleNamespace(
        model="mlp", rounds=2, per_round=2, warmup=1, compare="scaling", batch_size=4
    )
    rows, summary, _ = peer_compare.coordinate(
        args, peer_workers=2, printer=lambda line: None, binary=BINARY, flag_values=fv
    )
    assert [c[0] for c in calls] == [2, 1, 1, 2]  # rotated each round
    ours_argv = calls[0][1]
    one_argv, one_env = calls[1][1], calls[1][2]
    assert "--compression=bf16" in ours_argv and "--batch_size=4" in ours_argv
    assert "--compression=bf16" not in one_argv
    assert "TFDIST_OPT_COMPRESSION" not in one_env
    assert "TFDIST_OPT_COMPRESSION" in calls[0][2]
    assert one_argv.count("--batch_size=8") == 1 and "--batch_size=4" not in one_argv
    assert "--metrics=accuracy" in one_argv and "--metrics=accuracy" in ours_argv
    assert "--model=mlp" in one_argv
    assert [r["setting"] for r in rows] == ["opt", "one_process"]
    assert summary["fraction_of_one_process"] == pytest.approx(0.8)
    assert summary["round_spread_ours"] == 1.0


@pytest.mark.multiworker
@pytest.mark.slow
def test_scaling_under_the_launcher(tmp_path):
    out = tmp_path / "s.json"
    r = run_single(
        [
            "-m",
            "tfdist_opt",
            "launch",
            "-n",
            "2",
            "--",
            *python(),
            BINARY,
            "--model=mlp",
            "--compare=scaling",
            "--rounds=1",
            "--batch_size=4",
            "--num_warmup_batches=1",
            "--overlap_steps=0",
            "--num_batches=2",
            "--image_size=8",
            "--metrics=accuracy",
            f"--output_json={out}",
        ],
        timeout_s=300,
    )
    assert r.returncode == 0, r.output[-4000:]
    report = json.loads(out.read_text())
    rows, summary = report["results"], report["summary"]
    assert [row["setting"] for row in rows] == ["opt", "one_process"]
    assert [row["workers"] for row in rows] == [2, 1]
    assert {row["global_batch"] for row in rows} == {8}
    assert len({row["params"] for row in rows}) == 1
    assert summary["fraction_of_one_process"] == pytest.approx(
        summary["opt_eps"] / summary["one_process_eps"]
    )
    assert report["config"]["metrics"] == ["accuracy"]
