"""A stall aborts with exit code 43 and the launcher resumes the job (issue 33, items 3, 5).

`tfdist-opt launch -n 2 -- python scripts/rel_train.py` (a tiny Dense
model, 36 optimizer steps, `DistributedBackupAndRestore(save_freq=4)`) on
127.0.0.1 with `TFDIST_OPT_STALL_WARN_S=3`:

- worker 1's `tf.data` input sleeps 10 minutes at batch 22 (epoch 2) on
  the first attempt; with `TFDIST_OPT_STALL_ABORT_S=8` and `--max-restarts 1` the
  chief names it within stall_warn_s + 10 s (in the launcher's output,
  prefixed `[worker 0]`), every worker exits with 43 within
  stall_abort_s + 10 s, the launcher restarts the group, and the job
  resumes from the newest backup and ends with the weights of the
  uninterrupted run, bit for bit (scripts/rel_launch.py's reference).
- worker 1 SIGSTOPs itself after step 10 (`TFDIST_OPT_STALL_ABORT_S=4`):
  the message says its stack is unavailable because the process is
  stopped, and the launch ends with 43. TF's coordination heartbeat (10 s
  by default) would end the job too, with exit 1: on a loaded host it once
  won that race against an abort at 6 s, so this run sets it to
  HEARTBEAT_S (scripts/rel_train.py `--heartbeat-timeout-s`), and the
  abort's only deadline is that heartbeat.
"""

import json
import re

import numpy as np
import pytest

from tests.multiworker.scripts import rel_launch

pytestmark = [pytest.mark.multiworker, pytest.mark.slow]

WARN_S = 3
ABORT_STOPPED_S = 4  # the SIGSTOP case
HEARTBEAT_S = 300  # TF's coordination heartbeat in the SIGSTOP case (default 10)
NAMED = re.compile(
    r"\[worker 0\] tfdist_opt: stall: worker 1 has been at "
    r"(?:step (\d+)|the start of fit) "
    r"\((\w+)\) for (\d+) s; worker 0 waits in step (\d+)'s all-reduce\. "
    r"worker 1's stack: (.*)"
)
ABORTED = re.compile(
    r"\[worker 0\] tfdist_opt: stall: aborting after a stall of (\d+) s "
    r"\(stall_abort_s=(\d+)\): worker 1 has been at "
    r"(?:step \d+|the start of fit) \((\w+)\)"
)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return rel_launch.reference(tmp_path_factory)


def _env(abort_s):
    return {"TFDIST_OPT_STALL_WARN_S": str(WARN_S), "TFDIST_OPT_STALL_ABORT_S": str(abort_s)}


def test_input_stall_aborts_restarts_and_resumes_equal(tmp_path, reference):
    proc = rel_launch.start(
        tmp_path,
        "--max-restarts",
        "1",
        script_args=("--stall-kind", "input", "--stall-task", "1", "--stall-at-step", "22"),
        extra_env=_env(8),
    )
    seen_pids = []
    try:
        out, err = rel_launch.finish(proc)
        seen_pids = rel_launch.pids(tmp_path / "out")
        assert proc.returncode == 0, f"{out[-2000:]}\n{err[-4000:]}"
    finally:
        assert rel_launch.kill_pids(seen_pids) == [], "a worker outlived the launch"
    o = tmp_path / "out"
    named = next((m for m in NAMED.finditer(err) if m.group(2) == "input"), None)
    assert named, err[-4000:]
    assert WARN_S <= int(named.group(3)) <= WARN_S + 10
    aborted = ABORTED.search(err)
    assert aborted and aborted.group(3) == "input" and aborted.group(2) == "8", err[-4000:]
    assert 8 <= int(aborted.group(1)) <= 8 + 10
    assert (
        "[worker 1] tfdist_opt: stall: worker 1 exits with code 43: the chief aborted a stall of"
    ) in err
    assert re.search(
        r"\[launch\] worker [01] exited with code 43; stopped the other 1 "
        r"worker\(s\); restarting the group \(restart 1 of 1\)",
        err,
    ), err[-3000:]
    # Resumed from the newest backup, then the uninterrupted run's weights.
    # Batch 22 is epoch 2's 10th: the stall comes after the epoch-1 backups
    # whatever tf.data prefetched (its count runs ahead of the steps).
    restored = json.loads(rel_launch.read(o, "restored-0-1"))
    assert restored and restored["step"] in (12, 16, 20), restored
    ref = reference["workers"][0]
    for i in (0, 1):
        got = rel_launch.result(o, 1, i)
        assert got["step"] == ref["step"] == rel_launch.TOTAL_STEPS
        for a, b in zip(ref["weights"], got["weights"]):
            np.testing.assert_array_equal(np.array(a), np.array(b))
    t_stall = float(rel_launch.read(o, "stall-1"))
    restart = min(float(rel_launch.read(o, f"start-{i}-1")) for i in (0, 1)) - t_stall
    print(
        "\n".join(
            line
            for line in err.splitlines()
            if "tfdist_opt: stall:" in line or "exited with code 43" in line
        )
    )
    print(
        f"input stall: named after {named.group(3)} s, aborted after "
        f"{aborted.group(1)} s, group restarted {restart:.1f} s after the stall "
        f"began, resumed from step {restored['step']}"
    )


def test_sigstopped_worker_is_named_and_the_job_aborts(tmp_path):
    proc = rel_launch.start(
        tmp_path,
        script_args=(
            "--stall-kind",
            "sigstop",
            "--stall-task",
            "1",
            "--stall-at-step",
            "10",
            "--heartbeat-timeout-s",
            str(HEARTBEAT_S),
        ),
        extra_env=_env(ABORT_STOPPED_S),
    )
    seen_pids = []
    try:
        out, err = rel_launch.finish(proc)
        seen_pids = rel_launch.pids(tmp_path / "out")
    finally:
        assert rel_launch.kill_pids(seen_pids) == [], "a worker outlived the launch"
    assert proc.returncode == 43, f"{out[-2000:]}\n{err[-4000:]}"
    # (On a loaded host the first step's tracing may be named too.) A stopped
    # worker publishes nothing: its last published position (at most one
    # poll old: on a quiet host the start of fit) is named, at or before
    # step 10; worker 0 waits one step on.
    named = next((m for m in NAMED.finditer(err) if "stopped" in m.group(5)), None)
    assert named, err[-4000:]
    assert int(named.group(1) or 0) <= 10 and named.group(4) in ("10", "11"), err[-4000:]
    pid = rel_launch.pids(tmp_path / "out")[1]
    assert named.group(5) == (
        f"unavailable: process {pid} is stopped (state T: "
        "SIGSTOP), so it cannot report its stack or its "
        "latest position"
    )
    aborted = ABORTED.search(err)
    assert aborted and aborted.group(2) == str(ABORT_STOPPED_S), err[-4000:]
    # Named once stall_warn_s passed, before the abort; aborted once
    # stall_abort_s passed (exit 43 above: before the heartbeat).
    assert WARN_S <= int(named.group(3)) <= int(aborted.group(1)), err[-4000:]
    assert ABORT_STOPPED_S <= int(aborted.group(1)) < HEARTBEAT_S, err[-4000:]
    assert "[launch] worker 0 exited with code 43" in err
    print(
        "\n".join(
            line
            for line in err.splitlines()
            if "tfdist_opt: stall:" in line or "exited with code 43" in line
        )
    )
    print(f"SIGSTOP: named after {named.group(3)} s, aborted after {aborted.group(1)} s")
