"""A host's link cut mid-run (per-host lines): every process exits, naming the lost host.

Two emulated hosts run the per-host lines of `tfdist-opt launch --workers`
(the main job, long enough to be cut mid-run). Host 1's bridge port goes
down after two epochs: a silent partition (no RST). Then, as
docs/guides/several-hosts.md says:

- the chief's stall inspector (`stall_warn_s=1` here) names worker 1, and
  worker 1's stack is reported as unavailable from another host, with its
  host and address: never a state read from the chief's own `/proc` for a
  pid of another host (the hosts share one kernel here, so such a read
  would even "work": this test fails if it happens);
- every process on every host exits with code 1 within TF's coordination
  heartbeat (about 10 s) + 30 s of the cut, each printing
  `tfdist_opt: training stopped: ...` naming the other side's task and
  address.
"""

import threading
import time

import pytest

from tests.hosts import per_host

pytestmark = [pytest.mark.multiworker, pytest.mark.slow]

HEARTBEAT_S = 10  # TF's coordination-service heartbeat timeout
BOUND_S = HEARTBEAT_S + 30


def _follow(proc, lines, ended):
    for line in proc.stdout:
        lines.append((time.monotonic(), line.rstrip("\n")))
    proc.wait()
    ended.append(time.monotonic())


def test_a_cut_link_ends_every_process_naming_the_unreachable_host(testbed):
    lines = per_host.launch_lines(
        "--workers",
        f"{testbed[0].address}:2222,{testbed[1].address}:2222",
        command=[
            "python",
            "-m",
            "tfdist_opt.examples.train_cnn",
            "--epochs",
            "500",
            "--examples",
            "2048",
        ],
    )
    procs = per_host.start_lines(testbed, lines, {"TFDIST_OPT_STALL_WARN_S": "1"})
    outs, ends = [[], []], [[], []]
    readers = [
        threading.Thread(target=_follow, args=(p, outs[i], ends[i]), daemon=True)
        for i, p in enumerate(procs)
    ]
    for t in readers:
        t.start()
    deadline = time.monotonic() + 180
    while not any("Epoch 3/" in line for _, line in outs[0]):
        assert time.monotonic() < deadline and not any(ends), outs
        time.sleep(0.1)
    testbed.cut(1)
    cut = time.monotonic()
    try:
        for t in readers:
            t.join(timeout=BOUND_S + 20)
    finally:
        testbed.heal(1)
    texts = ["\n".join(line for _, line in out) for out in outs]
    for i, p in enumerate(procs):
        assert ends[i], (
            f"host {i}'s worker still runs {BOUND_S + 20} s after the cut:\n" + texts[i][-3000:]
        )
        assert p.returncode == 1, texts[i][-3000:]
        assert ends[i][0] - cut <= BOUND_S, (ends[i][0] - cut, texts[i][-3000:])
    chief, other = texts
    assert (
        "tfdist_opt: training stopped: a peer became unreachable; lost task: "
        f"worker:1 ({testbed[1].address}:2222)"
    ) in chief, chief[-3000:]
    assert (
        "tfdist_opt: training stopped: the coordination service stopped "
        f"answering (its heartbeat timed out): worker:0 ({testbed[0].address}"
        ":2222)"
    ) in other, other[-3000:]
    stack_lines = [line for line in chief.splitlines() if "worker 1's stack: unavailable" in line]
    assert stack_lines, chief[-3000:]
    for line in stack_lines:
        assert (
            f"at {testbed[1].address}:2222, another host: its state cannot be "
            "read from here" in line
        ), line
        for state in ("running", "sleeping", "stopped (state", "gone (no such"):
            assert state not in line, line
