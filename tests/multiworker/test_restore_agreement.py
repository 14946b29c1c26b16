"""Workers that would resume from different states stop together (issue 16, item 3).

`tfdist-opt launch -n 2 --max-restarts 1 -- python rel_train.py --backup
ROOT/backup-{index}` with `TFDIST_OPT_STORAGE_SHARING=shared`: each worker
has its own (unshared) backup dir but the job says all storage is shared, so
only the chief writes (with the default "auto" each worker would keep its
own copy: issue 23). Attempt 1: worker 1 crashes after step 10; the chief's
dir holds the backup of step 8, worker 1's none. Attempt 2: before step 1
both workers must refuse, with one line naming each worker's step and
directory, instead of training on into TF's "Shape mismatch in the
collective instance ...".
"""

import os

import pytest

from tests.multiworker.scripts import rel_launch

pytestmark = [pytest.mark.multiworker, pytest.mark.slow]


def test_unshared_backup_dirs_stop_every_worker_naming_steps_and_dirs(tmp_path):
    proc = rel_launch.start(
        tmp_path,
        "--max-restarts",
        "1",
        script_args=(
            "--crash-task",
            "1",
            "--crash-at-step",
            "10",
            "--backup",
            str(tmp_path / "backup-{index}"),
        ),
        extra_env={"TFDIST_OPT_STORAGE_SHARING": "shared"},
    )
    seen_pids = []
    try:
        out, err = rel_launch.finish(proc)
        seen_pids = rel_launch.pids(tmp_path / "out")
    finally:
        assert rel_launch.kill_pids(seen_pids) == [], "a worker outlived the launch"
    both = out + err
    assert proc.returncode not in (0, None), both[-3000:]
    o = tmp_path / "out"
    d0, d1 = tmp_path / "backup-0", tmp_path / "backup-1"
    line = (
        "workers restored different states: "
        f"worker_0 at step 8 (backup-8 in {d0}); "
        f"worker_1 at step 0 (no backup in {d1})"
    )
    for i in (0, 1):
        assert os.path.exists(o / f"refused-{i}-1"), both[-4000:]
        assert not os.path.exists(o / f"training-{i}-1")  # no step ran
        assert any(line in l and l.startswith(f"[worker {i}]") for l in both.splitlines()), both[
            -4000:
        ]
    assert "Shape mismatch" not in both
    assert sorted(os.listdir(d0)) == ["backup-4", "backup-8", "latest.json"]  # kept
    start = min(float(rel_launch.read(o, f"start-{i}-1")) for i in (0, 1))
    refused = max(float(rel_launch.read(o, f"refused-{i}-1")) for i in (0, 1))
    fit = max(float(rel_launch.read(o, f"fit-{i}-1")) for i in (0, 1))
    print(
        f"item 3: unshared backup dirs -> both workers refused "
        f"{refused - fit:.2f} s after the last one called fit "
        f"({refused - start:.2f} s after the restarted processes started)"
    )
    assert refused - start < 60
