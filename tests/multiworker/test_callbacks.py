"""tfdist_opt.callbacks on 2 real worker processes (MultiWorkerMirroredStrategy).

One uninterrupted run (whose workers then run BatchSizeFinder), one run
hard-killed mid-epoch (every worker `os._exit(9)` after optimizer step 11;
last backup at step 10 = epoch 1, batch 2), and its rerun. Worker scripts:
scripts/cb_train.py, scripts/cb_bsf.py.
"""

import glob
import json
import os

import numpy as np
import pytest

from tests.multiworker import harness
from tfdist_opt.callbacks import lr_math

TRAIN = "tests/multiworker/scripts/cb_train.py"
BASE_LR, BASE_BATCH, GLOBAL_BATCH, WARMUP, STEPS = 0.02, 4, 8, 16, 24


def _run(out, backup, tmp, kill_at=None, bsf=False):
    for d in (out, backup, tmp):
        os.makedirs(d, exist_ok=True)
    env = {"TMPDIR": str(tmp)}
    if kill_at:
        env["CB_KILL_AT_STEP"] = str(kill_at)
    if bsf:
        env["CB_BSF"] = "1"
    return harness.run_workers(
        2, [TRAIN, str(out), str(backup)], timeout_s=240 if bsf else 150, extra_env=env
    )


def _load(out):
    return [json.load(open(os.path.join(out, f"worker_{i}.json"))) for i in (0, 1)]


def _expected_lr(step):
    scaled = lr_math.linear_scaled_lr(BASE_LR, GLOBAL_BATCH, BASE_BATCH)
    return lr_math.scheduled_lr(step, BASE_LR, scaled, WARMUP)


def _no_backup_temp_dirs(tmp):
    return [p for p in os.listdir(tmp) if p.startswith("tfdist_opt_backup")] == []


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The uninterrupted run; its workers then run BatchSizeFinder (CB_BSF)."""
    a = tmp_path_factory.mktemp("uninterrupted")
    res = _run(a / "out", a / "backup", a / "tmp", bsf=True)
    assert [r.returncode for r in res] == [0, 0], [r.output[-2000:] for r in res]
    return a, res


@pytest.mark.multiworker
@pytest.mark.slow
def test_two_workers_values_chief_only_and_kill_resume(tmp_path, uninterrupted):
    # --- uninterrupted reference run
    a, res = uninterrupted
    w0, w1 = _load(a / "out")
    assert w0["chief"] and not w1["chief"]
    for w in (w0, w1):  # values written into logs on every worker
        for key in (
            "examples_per_sec",
            "examples_per_sec_per_replica",
            "step_time_median",
            "step_time_p90",
            "comm_fraction",
            "lr",
        ):
            assert len(w["history"][key]) == 3, key
        assert 0 < w["comm_fraction"] <= 1
        assert w["throughput"]["num_replicas"] == 2
    # only the chief prints and writes
    assert "ThroughputMonitor summary" in res[0].output
    assert "CommunicationProfiler epoch 3" in res[0].output
    assert "ThroughputMonitor" not in res[1].output
    assert "CommunicationProfiler" not in res[1].output
    assert json.load(open(a / "out" / "throughput.json"))["num_replicas"] == 2
    trace = json.load(open(a / "out" / "trace.json"))["traceEvents"]
    assert {e["pid"] for e in trace} == {"worker_0"}
    assert len(glob.glob(str(a / "out" / "tb" / "events*"))) == 1
    # backups: deleted at the end of a finished run, non-chief temp dirs gone
    assert os.listdir(a / "backup") == []
    assert _no_backup_temp_dirs(a / "tmp")
    # LR schedule equals the formula at every step
    assert sorted(map(int, w0["lrs"])) == list(range(STEPS))
    for step, lr in w0["lrs"].items():
        assert lr == pytest.approx(_expected_lr(int(step)), rel=1e-6)

    # --- killed mid-epoch, then rerun
    b = tmp_path / "b"
    res = _run(b / "out", b / "backup", b / "tmp", kill_at=11)
    assert [r.returncode for r in res] == [9, 9], [r.output[-2000:] for r in res]
    latest = json.load(open(b / "backup" / "latest.json"))
    assert (latest["epoch"], latest["calls"], latest["step"]) == (1, 2, 10)
    res = _run(b / "out", b / "backup", b / "tmp")
    assert [r.returncode for r in res] == [0, 0], [r.output[-2000:] for r in res]
    r0, r1 = _load(b / "out")
    assert r0["restored"]["step"] == 10 and r1["restored"]["step"] == 10
    # resume continues the schedule (steps 10..15 are still in warmup)
    assert sorted(map(int, r0["lrs"])) == list(range(10, STEPS))
    for step, lr in r0["lrs"].items():
        assert lr == pytest.approx(_expected_lr(int(step)), rel=1e-6)
    # final weights equal the uninterrupted run's, exactly, on both workers
    for ref, got in zip(w0["weights"], r0["weights"]):
        np.testing.assert_array_equal(np.array(ref), np.array(got))
    for x, y in zip(r0["weights"], r1["weights"]):
        np.testing.assert_array_equal(np.array(x), np.array(y))
    assert os.listdir(b / "backup") == []
    assert _no_backup_temp_dirs(b / "tmp")


@pytest.mark.multiworker
def test_batch_size_finder_two_workers_agree(uninterrupted):
    _, res = uninterrupted
    results = [
        json.loads(
            next(
                line[len("RESULT ") :]
                for line in r.output.splitlines()
                if line.startswith("RESULT ")
            )
        )
        for r in res
    ]
    assert results[0] == results[1]
    oom, plateau = results[0]["oom"], results[0]["plateau"]
    assert oom == [8, pytest.approx(0.2), "out_of_memory", [4, 8]]
    # Where throughput stops rising by 20% depends on the machine's load;
    # what must hold is that it stopped on a plateau, in order, and that
    # both workers agreed (above).
    assert plateau[1] == "plateau"
    assert plateau[2] == [10, 20, 40, 80, 160, 320, 640, 1280][: len(plateau[2])]
    assert len(plateau[2]) >= 2
    assert "BatchSizeFinder" in res[0].output and "BatchSizeFinder" not in res[1].output
