"""The stall decision from hand-written records and clock readings (pure)."""

import pytest

from tfdist_opt.stall import policy
from tfdist_opt.stall.policy import Progress

NAMES = {0: "worker 0", 1: "worker 1", 2: "worker 2"}


def rec(task, seq, step, phase, since):
    return Progress(task, seq, step, phase, since, pid=100 + task, host="h")


def test_worker_in_input_is_behind_the_ones_in_the_all_reduce():
    records = {
        0: rec(0, 83, 42, "step", 1000.0),
        1: rec(1, 83, 42, "input", 990.0),
        2: rec(2, 83, 42, "step", 1001.0),
    }
    stall = policy.assess(records, [0, 1, 2], now=1053.0)
    assert [p.task for p in stall.behind] == [1]
    assert stall.duration == 63.0
    assert policy.laggards(stall) == [1]
    assert policy.describe(stall, NAMES) == (
        "worker 1 has been at step 42 (input) for 63 s; workers 0 and 2 wait "
        "in step 42's all-reduce."
    )


def test_worker_in_callbacks_is_behind_by_event_count():
    records = {0: rec(0, 85, 43, "step", 1000.0), 1: rec(1, 84, 42, "callbacks", 995.0)}
    stall = policy.assess(records, [0, 1], now=1005.0)
    assert policy.describe(stall, NAMES) == (
        "worker 1 has been at step 42 (callbacks) for 10 s; worker 0 waits in step 43's all-reduce."
    )


def test_a_relabelled_save_keeps_its_place():
    records = {0: rec(0, 84, 42, "saving", 990.0), 1: rec(1, 85, 43, "step", 991.0)}
    stall = policy.assess(records, [0, 1], now=1000.0)
    assert "worker 0 has been at step 42 (saving) for 10 s" in policy.describe(stall, NAMES)


def test_everyone_at_one_place_is_a_stall_with_nobody_waiting():
    records = {0: rec(0, 9, 5, "step", 100.0), 1: rec(1, 9, 5, "step", 101.0)}
    stall = policy.assess(records, [0, 1], now=161.0)
    assert stall.waiting == () and stall.duration == 60.0
    assert policy.laggards(stall) == []
    assert policy.describe(stall, NAMES).startswith(
        "no worker has advanced for 60 s: workers 0 and 1 at step 5 (step)"
    )


def test_a_worker_not_in_fit_is_named():
    stall = policy.assess({0: rec(0, 2, 1, "step", 50.0)}, [0, 1], now=80.0)
    assert stall.missing == (1,) and policy.laggards(stall) == [1]
    assert policy.describe(stall, NAMES) == (
        "worker 1 has not started fit (no progress published) for 30 s; "
        "worker 0 waits in step 1's all-reduce."
    )


def test_done_or_empty_is_no_stall():
    assert policy.assess({}, [0, 1], 5.0) is None
    done = {t: rec(t, 9, 4, "done", 0.0) for t in (0, 1)}
    assert policy.assess(done, [0, 1], 500.0) is None


def test_start_of_fit_wording_and_mixed_roles():
    records = {0: rec(0, 1, 0, "callbacks", 0.0), 1: rec(1, 2, 1, "step", 1.0)}
    text = policy.describe(policy.assess(records, [0, 1], 10.0), {0: "chief 0", 1: "worker 0"})
    assert text.startswith("chief 0 has been at the start of fit (callbacks)")


def test_progress_round_trips_through_json():
    p = rec(1, 3, 2, "input", 12.5)
    assert Progress.from_json(p.to_json()) == p


def _stall(duration, task=1, seq=5):
    return policy.Stall(
        (rec(task, seq, 3, "input", 0.0),), (rec(0, seq, 3, "step", 0.0),), (), 0.0, duration
    )


def test_policy_warns_once_per_period_then_aborts():
    pol = policy.StallPolicy(warn_s=3, abort_s=8)
    assert pol.update(_stall(2.9), 2.9) is None
    assert pol.update(_stall(3.0), 3.0) == policy.WARN
    assert pol.update(_stall(4.0), 4.0) is None
    assert pol.update(_stall(5.9), 5.9) is None
    assert pol.update(_stall(6.0), 6.0) == policy.WARN
    assert pol.update(_stall(8.0), 8.0) == policy.ABORT
    assert pol.update(_stall(9.0), 9.0) != policy.ABORT  # once


def test_policy_new_stall_warns_again_and_recovery_resets():
    pol = policy.StallPolicy(warn_s=3)
    assert pol.update(_stall(3.0), 3.0) == policy.WARN
    assert pol.update(_stall(3.5, task=0, seq=6), 3.5) == policy.WARN  # another worker
    assert pol.update(None, 4.0) is None
    assert pol.update(_stall(3.0), 7.0) == policy.WARN
    assert policy.StallPolicy(3, None).update(_stall(1e6), 1e6) == policy.WARN


@pytest.mark.parametrize(
    "phase,text",
    [
        ("validation", "waits in validation after step 3"),
        ("done", "worker 0 finished fit"),
        ("callbacks", "waits at step 3 (callbacks)"),
    ],
)
def test_waiting_phases_are_worded(phase, text):
    stall = policy.Stall(
        (rec(1, 5, 3, "callbacks", 0.0),), (rec(0, 7, 3, phase, 0.0),), (), 0.0, 10.0
    )
    assert text in policy.describe(stall, NAMES)


def test_the_last_worker_in_fit_is_not_a_stall_when_the_others_left():
    records = {0: rec(0, 90, 30, "callbacks", 0.0), 1: rec(1, 92, 30, "done", 0.0)}
    assert policy.assess(records, [0, 1], now=100.0) is None
