"""Faults with real worker processes on 127.0.0.1 (issue 8).

Each test states the time-to-detect it allows; the measured figures are in
the closing note of the change that added them.
"""

import json
import re
import socket
import time

import pytest

from tests.multiworker import harness

pytestmark = pytest.mark.multiworker

SCRIPT = "tests/multiworker/scripts/fault_train.py"


def test_peer_never_starts_exits_within_startup_deadline_naming_it():
    ports = harness.free_ports(2)
    t0 = time.monotonic()
    [r] = harness.run_workers(
        2,
        [SCRIPT],
        only=[0],
        ports=ports,
        timeout_s=90,
        extra_env={"TFDIST_OPT_STARTUP_TIMEOUT_S": "5"},
    )
    elapsed = time.monotonic() - t0
    assert r.returncode == -9, r.output[-3000:]  # SIGKILL from the watchdog
    assert (
        f"worker:0 gave up: multi-worker start-up did not finish within "
        f"startup_timeout_s=5 s; not listening: worker:1 (localhost:{ports[1]})"
    ) in r.output
    assert elapsed < 45  # 5 s deadline + TF start-up on a loaded 2-core machine


def test_port_taken_is_reported_with_port_and_task():
    ports = harness.free_ports(2)
    holder = socket.socket()
    holder.bind(("127.0.0.1", ports[0]))
    holder.listen(1)
    try:
        t0 = time.monotonic()
        [r] = harness.run_workers(2, [SCRIPT], only=[0], ports=ports, timeout_s=60)
        elapsed = time.monotonic() - t0
    finally:
        holder.close()
    assert r.returncode not in (0, None)
    assert f"worker 0 (localhost:{ports[0]})" in r.output, r.output[-3000:]
    assert str(ports[0]) in r.output and "already in use" in r.output
    assert elapsed < 30  # the check itself is instant; the rest is Python + TF import


def test_multi_worker_without_tf_config_is_refused():
    r = harness.run_single([SCRIPT], extra_env={"TFDIST_OPT_MODE": "multi_worker"}, timeout_s=60)
    assert r.returncode != 0
    assert "multi_worker needs a TF_CONFIG" in r.output


BAD_TF_CONFIGS = [  # (TF_CONFIG, text the error must contain)
    ('{"cluster": {"worker": ["localhost:1"]', "malformed JSON"),
    (
        '{"cluster": {"worker": ["localhost:1", "localhost:2"]}, "task": {"type": "boss", "index": 0}}',
        "task.type",
    ),
    (
        '{"cluster": {"worker": ["localhost:1", "localhost:2"]}, "task": {"type": "worker", "index": -1}}',
        "Received: task.index=-1",
    ),
    (
        '{"cluster": {"worker": ["localhost:1", "localhost:2"]}, "task": {"type": "worker", "index": 2}}',
        "Received: task.index=2",
    ),
    (
        '{"cluster": {"worker": ["localhost:1", "localhost:2"]}, "task": {"type": "worker", "index": "one"}}',
        "Received: task.index='one'",
    ),
    (
        '{"cluster": {"chief": ["localhost:1", "localhost:3"], "worker": ["localhost:2"]}, "task": {"type": "worker", "index": 0}}',
        "chief",
    ),
]


@pytest.fixture(scope="module")
def bad_tf_configs():
    """Every bad TF_CONFIG tried in turn in one process (one TF start-up)."""
    t0 = time.monotonic()
    r = harness.run_single(
        ["tests/multiworker/scripts/bad_tf_configs.py", json.dumps([c for c, _ in BAD_TF_CONFIGS])],
        timeout_s=60,
    )
    elapsed = time.monotonic() - t0
    results = {}
    for line in r.output.splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[len("RESULT ") :])
            results[res["case"]] = res
    return r, results, elapsed


@pytest.mark.parametrize("case", range(len(BAD_TF_CONFIGS)))
def test_bad_tf_config_fails_before_any_server(case, bad_tf_configs):
    r, results, elapsed = bad_tf_configs
    expected = BAD_TF_CONFIGS[case][1]
    assert case in results, r.output[-3000:]
    error = results[case]["error"]
    assert error is not None, f"case {case} started a strategy:\n{r.output[-3000:]}"
    assert "Invalid TF_CONFIG" in error and expected in error, error
    assert results[case]["seconds"] < 5  # raised while validating: nothing waits for peers
    assert elapsed < 40


def test_peer_crash_mid_training_stops_survivor_naming_lost_task():
    t0 = time.monotonic()
    results = harness.run_workers(
        2,
        [SCRIPT, "--steps", "2000", "--die_task", "1", "--die_at_step", "20"],
        timeout_s=120,
        extra_env={"TFDIST_OPT_COLLECTIVE_TIMEOUT_S": "30"},
    )
    elapsed = time.monotonic() - t0
    survivor, dead = results
    assert dead.returncode == 1 and "dying at step 20" in dead.output
    assert survivor.returncode not in (0, None), "survivor must not hang or succeed"
    assert "tfdist_opt: training stopped:" in survivor.output
    assert "lost task: worker:1 (localhost:" in survivor.output, survivor.output[-3000:]
    assert elapsed < 60


@pytest.mark.slow
def test_collective_timeout_ends_a_step_stuck_on_a_peer():
    """`collective_timeout_s=3`: worker 1 sleeps 20 s after step 5; worker 0,
    in a later step's all-reduce, aborts its collectives 3-5 s on (the
    inspector polls every second) and exits naming the timeout; worker 1
    then finds its peer gone."""
    t0 = time.monotonic()
    results = harness.run_workers(
        2,
        [SCRIPT, "--steps", "2000", "--sleep_task", "1", "--sleep_at_step", "5", "--sleep_s", "20"],
        timeout_s=120,
        extra_env={"TFDIST_OPT_COLLECTIVE_TIMEOUT_S": "3"},
    )
    elapsed = time.monotonic() - t0
    waiting, sleeping = results
    assert "sleeping 20 s at step 5" in sleeping.output, sleeping.output[-3000:]
    assert waiting.returncode == 1, waiting.output[-3000:]
    fired = re.search(
        r"tfdist_opt: stall: worker 0's train step (\d+) has run (\d+) s "
        r"\(collective_timeout_s=3\): its collectives are aborted",
        waiting.output,
    )
    assert fired and int(fired.group(1)) >= 6 and 3 <= int(fired.group(2)) <= 5, waiting.output[
        -3000:
    ]
    assert (
        "tfdist_opt: training stopped: a collective timed out (collective_timeout_s=3)"
    ) in waiting.output, waiting.output[-3000:]
    assert sleeping.returncode not in (0, None), sleeping.output[-3000:]
    assert elapsed < 100


def _slope(points):
    """Least-squares slope of [(x, y), ...]."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    return sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)


@pytest.mark.slow
def test_soak_300_steps_no_leak():
    """RSS and OS threads (from /proc/self/status) every 10 steps of 300.

    After a 100-step warm-up the RSS slope (a least-squares line) must stay
    under 16 KB/step (measured: 3.6-3.7 KB/step, still falling) and the
    thread count must not rise. Run with `collective_timeout_s=60`: passed
    to TensorFlow as the collectives' `timeout_seconds`, it started one OS
    thread per collective that sleeps out the timeout
    (tensorflow/core/common_runtime/base_collective_executor.cc, "TODO:
    Share the timeout watchdog thread among collectives"), 4 per step of
    this model, thousands over a run; the stall inspector's thread enforces
    it instead, so the count stays flat.
    """
    results = harness.run_workers(
        2,
        [SCRIPT, "--steps", "300", "--soak"],
        timeout_s=240,
        extra_env={"TFDIST_OPT_COLLECTIVE_TIMEOUT_S": "60"},
    )
    for r in results:
        assert r.returncode == 0, r.output[-3000:]
        line = [l for l in r.output.splitlines() if l.startswith("RESULT ")][-1]
        res = json.loads(line[len("RESULT ") :])
        assert res["steps"] == 300
        # (step, rss_mb, os_threads) every 10 steps, then once after fit.
        samples = res["samples"]
        assert [s[0] for s in samples] == list(range(0, 300, 10)) + [300]
        after = [s for s in samples if s[0] >= 100]
        slope_kb = _slope([(step, rss * 1024) for step, rss, _ in after])
        print("soak", r.index, f"rss slope {slope_kb:.2f} KB/step", samples)
        assert slope_kb < 16, samples
        threads_at_warm = after[0][2]
        assert max(t for _, _, t in after) <= threads_at_warm + 2, samples
