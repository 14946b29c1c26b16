"""`benchmarks/train.py --compare=peer`: ours vs tf_keras and a Keras 3 loop.

The coordinator's pure parts (summary, which cluster size, bad input) run
in-process, and so does the coordinator over two rounds with a stand-in for
the launcher (the order rotates, each round's windows are pooled). One real
run of one round under `tfdist-opt launch -n 2` checks that every setting
trained the same model on the same global batch, each with its own Keras,
and that the summary is ours over the faster peer.
"""

import json
import os
import types

import pytest
from absl import app

from benchmarks.train_lib import peer_compare
from tfdist_opt.launch import local as launcher
from tests.multiworker.harness import REPO_ROOT
from tests.multiworker.harness import python
from tests.multiworker.harness import run_single

BINARY = os.path.join(REPO_ROOT, "benchmarks", "train.py")


def test_speedup_vs_peer_is_ours_over_the_faster_peer():
    s = peer_compare.peer_summary(
        {"ours": 300.0, "tf_keras": 100.0, "keras3_ctl": 150.0}, overlap=0.25
    )
    assert s["speedup_vs_peer"] == pytest.approx(2.0)
    assert s["speedup_vs_tf_keras"] == pytest.approx(3.0)
    assert s["speedup_vs_keras3_ctl"] == pytest.approx(2.0)
    assert (s["opt_eps"], s["peer_tf_keras_eps"], s["overlap_fraction"]) == (300.0, 100.0, 0.25)


def test_cluster_size_from_the_launch_or_the_flag():
    assert peer_compare.cluster_size(3, environ={}) == 3
    tf_config = json.dumps(
        {
            "cluster": {"worker": ["localhost:1", "localhost:2"]},
            "task": {"type": "worker", "index": 0},
        }
    )
    assert (
        peer_compare.cluster_size(
            5, environ={"TF_CONFIG": tf_config, "TFDIST_LAUNCH_NUM_WORKERS": "2"}
        )
        == 2
    )
    with pytest.raises(app.UsageError, match="runs under `tfdist-opt launch"):
        peer_compare.cluster_size(2, environ={"TF_CONFIG": tf_config})


@pytest.mark.parametrize(
    "args,message",
    [
        (["--model=transformer"], "the tf_keras peer cannot build it"),
        (["--data=tfrecord:x*"], "Invalid value for `--data` with --compare=peer"),
        (["--peer_workers=0"], "Invalid value for `--peer_workers`"),
    ],
)
def test_bad_peer_arguments_fail_before_any_cluster(args, message):
    r = run_single([BINARY, "--compare=peer", *args], timeout_s=60)
    assert r.returncode != 0 and message in r.output, r.output[-2000:]
    assert "round 1/" not in r.output


def test_coordinator_rotates_the_order_and_pools_every_round(monkeypatch):
    # A stand-in launcher: each child "run" writes the JSON a real child
    # writes, with window durations that tell the role and the round apart.
    calls = []

    def fake_run_local(argv, n, *, env, stdout, stderr, startup_timeout):
        del stdout, stderr, startup_timeout
        role = [a for a in argv if a.startswith("--peer_role=")][0].split("=")[1]
        out = [a for a in argv if a.startswith("--output_json=")][0].split("=", 1)[1]
        r = sum(1 for c in calls if c[0] == role)  # this role's round
        calls.append(
            (
                role,
                n,
                env["TF_USE_LEGACY_KERAS"],
                [a for a in argv if a.startswith("--num_batches=")],
            )
        )
        base = {"ours": 0.1, "tf_keras": 0.2, "keras3_ctl": 0.4}[role] * (r + 1)
        row = {
            "setting": {"ours": "opt"}.get(role, "peer_" + role),
            "median": 8 / base,
            "global_batch": 8,
            "window_batches": 1,
            "window_durations_s": [base, base],
            "wall_s": 1.5,
        }
        with open(out, "w") as f:
            json.dump({"results": [row], "environment": {"load_avg_1m": 0.5 + r}}, f)
        return types.SimpleNamespace(returncode=0, message="ok")

    monkeypatch.setattr(launcher, "run_local", fake_run_local)
    monkeypatch.delenv("TF_CONFIG", raising=False)
    args = types.SimpleNamespace(
        model="mlp", rounds=2, per_round=2, warmup=1, compare="peer", batch_size=4
    )
    printed = []
    rows, summary, config = peer_compare.coordinate(
        args, peer_workers=3, printer=printed.append, binary=BINARY
    )
    assert [c[0] for c in calls] == [
        "ours",
        "tf_keras",
        "keras3_ctl",
        "tf_keras",
        "keras3_ctl",
        "ours",
    ]
    assert all(c[1] == 3 and c[3] == ["--num_batches=2"] for c in calls)
    assert [c[2] for c in calls[:3]] == ["0", "1", "0"]  # its own Keras each
    assert "round 2/2: ours on 3 worker(s)" in printed
    ours = rows[0]
    assert [r["setting"] for r in rows] == ["opt", "peer_tf_keras", "peer_keras3_ctl"]
    assert ours["rounds"] == 2 and ours["timed_batches"] == 4
    assert ours["round_medians"] == [80.0, 40.0]
    assert ours["wall_s"] == 3.0 and ours["load_avg_1m_rounds"] == [0.5, 1.5]
    # pooled: the median of the rates of 0.1, 0.1, 0.2, 0.2 s windows of 8
    assert summary["opt_eps"] == pytest.approx((80 + 40) / 2)
    assert summary["speedup_vs_peer"] == pytest.approx(2.0)
    assert "2 round(s) of 2 timed batches" in config["comparison"]


@pytest.mark.multiworker
@pytest.mark.slow
def test_peer_compare_under_the_launcher(tmp_path):
    out = tmp_path / "p.json"
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
            "--compare=peer",
            "--rounds=1",
            "--batch_size=4",
            "--num_warmup_batches=1",
            "--num_batches=2",
            "--image_size=8",
            f"--output_json={out}",
        ],
        timeout_s=540,
    )
    assert r.returncode == 0, r.output[-4000:]
    report = json.loads(out.read_text())
    rows, summary = report["results"], report["summary"]
    assert [row["setting"] for row in rows] == ["opt", "peer_tf_keras", "peer_keras3_ctl"]
    # the same model and global batch everywhere; each its own Keras
    assert len({row["params"] for row in rows}) == 1
    assert rows[0]["params"] == 8 * 8 * 3 * 2048 + 2048 + 2048 * 2048 + 2048 + 20490
    assert {row["global_batch"] for row in rows} == {8}
    assert rows[1]["keras"].startswith("tf_keras 2.")
    assert rows[0]["keras"].startswith("keras 3.")
    assert rows[2]["keras"].startswith("keras 3.")
    # ours runs every default through our hooks on 2 workers; the peers never
    assert [row["hooked"] for row in rows] == [True, False, False]
    for row in rows:
        assert row["rounds"] == 1 and len(row["round_medians"]) == 1
        assert row["steps"] == 2 and "window_durations_s" not in row
    peers = [summary["peer_tf_keras_eps"], summary["peer_keras3_ctl_eps"]]
    assert summary["speedup_vs_peer"] == pytest.approx(summary["opt_eps"] / max(peers))
    assert report["environment"]["load_avg_1m"] is not None
    # ours traced 3 more steps: the share of all-reduce time before backprop ends
    assert 0.0 <= summary["overlap_fraction"] <= 1.0
    assert rows[0]["traced_steps"] >= 1
    assert "--compare=peer: worker 0 runs the clusters" in r.output


def test_overlap_fraction_from_trace_events():
    from benchmarks.train_lib import overlap

    step = "EagerLocalExecute: __inference_multi_step_on_iterator_12"
    grad = "StatefulPartitionedCall/gradient_tape/dense/MatMul:_MklMatMul"
    comm = "StatefulPartitionedCall/sgd/CollectiveReduceV2:CollectiveReduceV2"
    events = [
        # step 1: backprop 0..10, all-reduce 6..14 (4 of 8 overlapped)
        (step, 0, 20),
        (grad, 0, 10),
        (comm, 6, 14),
        (comm, 7, 9),
        # step 2: all-reduce only after backprop (0 of 5)
        (step, 30, 50),
        (grad, 30, 40),
        (comm, 41, 46),
        # a collective outside any step is ignored
        (comm, 60, 70),
    ]
    figures = overlap.overlap_from_events(events)
    assert figures["overlap_fraction"] == pytest.approx(4 / 13)
    assert figures["early_start_fraction"] == pytest.approx(0.5)
    assert figures["traced_steps"] == 2
    assert overlap.overlap_from_events([(step, 0, 5), (grad, 0, 4)]) is None
