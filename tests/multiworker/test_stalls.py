"""A stuck worker is named (issue 33, items 2, 4, 5) on 2 real workers, one cluster.

scripts/stall_train.py runs once as 2 workers on 127.0.0.1 with
`TFDIST_OPT_STALL_WARN_S=2` (the module shares that cluster):

- part 1: worker 1 stalls three times, in its `tf.data` input, in
  `on_train_batch_end`, and in `on_train_batch_end` waiting for a lock
  another thread holds; the chief must print, for each, `worker 1 has been
  at step N (PHASE) for S s; worker 0 waits in step M's all-reduce. worker
  1's stack: ...` with S >= stall_warn_s and the frames that explain it, at
  most once per stall_warn_s. Each stall lasts until the chief has named it
  (the script watches the chief's messages; at most STALL_CAP_S), so a
  loaded host that names it late makes it last longer, not the test fail;
  S <= STALL_CAP_S is then all the clock bounds;
- part 2: one 2-epoch fit per input kind with worker 1 holding 3 fewer
  batches (7 vs 10): every kind ends each epoch on both workers at the same
  step, the longest input's end (`STEPS`, per kind), with the same finite
  weights, and the
  known-length kinds log one warning naming both workers' batch counts.

The abort and the restart are in test_stall_abort.py.
"""

import json
import math
import re

import numpy as np
import pytest

from tests.multiworker import harness

pytestmark = [pytest.mark.multiworker, pytest.mark.slow]

SCRIPT = "tests/multiworker/scripts/stall_train.py"
WARN_S = 2
STALL_CAP_S = 120
PREFIX = "tfdist_opt: stall: "
KINDS = (
    "tf.data",
    "tf.data, inspector off",
    "tf.data unknown cardinality",
    "dataset function",
    "generator",
    "PyDataset",
    "build_dataset",
)


# Steps per epoch when every epoch runs to the longest input's end (worker
# 0's 10 batches of 8): 10 per-worker batches (a tf.data dataset with
# auto-sharding off is per-worker data, `global_batch.per_worker_batch`). A generator
# object cannot restart: its second epoch replays the 2 batches Keras peeked
# and ends ("Your input ran out of data"), as plain Keras does on one device.
STEPS = {
    "tf.data": [10, 10],
    "tf.data, inspector off": [10, 10],
    "tf.data unknown cardinality": [10, 10],
    "dataset function": [10, 10],
    "generator": [10, 2],
    "PyDataset": [10, 10],
    "build_dataset": [10, 10],
}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    results = harness.run_workers(
        2,
        [SCRIPT],
        timeout_s=600,
        extra_env={
            "TFDIST_OPT_STALL_WARN_S": str(WARN_S),
            "STALL_DIR": str(tmp_path_factory.mktemp("stalls")),
            "STALL_CAP_S": str(STALL_CAP_S),
        },
    )
    for r in results:
        assert r.returncode == 0 and "ALL DONE" in r.output, r.output[-4000:]
    return results


def blocks(output):
    """Each stall message with the stack lines that follow it."""
    found, current = [], None
    for line in output.splitlines():
        if line.startswith(PREFIX):
            current = [line[len(PREFIX) :]]
            found.append(current)
        elif current is not None and (line.startswith(("  ", "Thread "))):
            current.append(line)
        else:
            current = None
    return ["\n".join(b) for b in found]


def _named(run, phase_re):
    pattern = re.compile(
        r"^worker 1 has been at step (\d+) \("
        + phase_re
        + r"\) for (\d+) s; worker 0 waits in step (\d+)'s all-reduce\. "
        r"worker 1's stack: "
    )
    hits = [(b, pattern.match(b)) for b in blocks(run[0].output)]
    return [(b, m) for b, m in hits if m]


def test_input_stall_is_named_with_the_input_threads_stack(run):
    hits = _named(run, "input")
    assert hits, "\n\n".join(blocks(run[0].output))
    text, m = hits[0]
    assert WARN_S <= int(m.group(2)) <= STALL_CAP_S
    assert m.group(1) == m.group(3)  # worker 0 waits in the same step
    assert "in maybe_sleep" in text and "stall_until_named(" in text
    print(f"input stall named after {m.group(2)} s: {text.splitlines()[0]}")


def test_callback_stall_is_named_with_its_stack(run):
    hits = [(b, m) for b, m in _named(run, "callbacks") if m.group(1) == "14"]
    assert hits, "\n\n".join(blocks(run[0].output))
    text, m = hits[0]
    assert m.group(3) == "15" and WARN_S <= int(m.group(2)) <= STALL_CAP_S
    assert "in on_train_batch_end" in text and "stall_until_named(" in text
    print(f"callback stall named after {m.group(2)} s: {text.splitlines()[0]}")


def test_lock_wait_is_named_with_the_holders_stack(run):
    hits = [(b, m) for b, m in _named(run, "callbacks") if m.group(1) == "22"]
    assert hits, "\n\n".join(blocks(run[0].output))
    text, m = hits[0]
    assert m.group(3) == "23" and WARN_S <= int(m.group(2)) <= STALL_CAP_S
    assert "with LOCK:" in text and "Thread lock-holder" in text
    print(f"lock stall named after {m.group(2)} s: {text.splitlines()[0]}")


def test_messages_come_from_the_chief_at_most_once_per_period(run):
    assert PREFIX not in run[1].output
    part1 = run[0].output.split("PART1 done")[0]
    lasted = {
        kind: float(s) for kind, s in re.findall(r"^STALLED (\w+) ([\d.]+)$", run[1].output, re.M)
    }
    assert sorted(lasted) == ["callback", "input", "lock"], run[1].output[-3000:]
    for step, kind in (("14", "callback"), ("22", "lock")):
        assert lasted[kind] < STALL_CAP_S  # ended because it was named
        n = sum(1 for b in blocks(part1) if b.startswith(f"worker 1 has been at step {step} "))
        assert 1 <= n <= math.ceil(lasted[kind] / WARN_S), (n, lasted[kind])


def _uneven(output):
    return {
        r["kind"]: r
        for r in (
            json.loads(line[len("UNEVEN ") :])
            for line in output.splitlines()
            if line.startswith("UNEVEN ")
        )
    }


def test_uneven_inputs_end_every_epoch_together_for_every_kind(run):
    w0, w1 = (_uneven(r.output) for r in run)
    assert sorted(w0) == sorted(w1) == sorted(KINDS)
    assert {kind: w0[kind]["steps"] for kind in KINDS} == STEPS
    for kind in KINDS:
        assert w0[kind]["error"] is None and w1[kind]["error"] is None, (kind, w0, w1)
        assert w0[kind]["steps"] == w1[kind]["steps"], kind
        for a, b in zip(w0[kind]["weights"], w1[kind]["weights"]):
            assert np.isfinite(np.array(a)).all(), kind
            np.testing.assert_array_equal(np.array(a), np.array(b))
        print(
            f"uneven {kind}: steps per epoch {w0[kind]['steps']} on both workers, "
            f"{w0[kind]['seconds']} s"
        )
    warning = (
        "tfdist_opt: uneven inputs: batches per epoch: worker 0: 10, worker 1: 7. "
        "Each epoch runs until the last worker's input runs out"
    )
    assert run[0].output.count(warning) == 1, run[0].output[-3000:]
    assert warning not in run[1].output
