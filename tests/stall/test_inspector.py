"""The inspector's protocol over a fake key-value store and a fake clock (no TF)."""

import io
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from tests.kv_fake import ThreadStore
from tfdist_opt.stall import inspector as inspector_lib
from tfdist_opt.stall import stacks

NAMES = {0: "worker 0", 1: "worker 1"}


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def make(task, store, clock, pending=None, abort_s=None, stack="STACK"):
    out = io.StringIO()
    codes = []

    def exit_fn(code):
        codes.append(code)

    insp = inspector_lib.Inspector(
        inspector_lib.LocalProgress(clock),
        task,
        NAMES,
        store,
        "ns/1",
        warn_s=3.0,
        abort_s=abort_s,
        input_pending=pending,
        clock=clock,
        out=out,
        exit_fn=exit_fn,
        stack_fn=lambda: f"{stack} of {task}",
        pid=4242 + task,
        host="elsewhere",
        host_id="boot-x/net:1",
        addresses={0: "10.0.0.1:2222", 1: "10.0.0.2:2222"},
    )
    insp.stack_wait_s = 0.3
    return insp, out, codes


def test_input_stall_is_named_with_the_stuck_workers_stack():
    store, clock = ThreadStore(), Clock()
    chief, out, _ = make(0, store, clock)
    pending = [False]
    w1, _, _ = make(1, store, clock, pending=lambda: pending[0])
    chief.local.enter("step", step=1)
    w1.local.enter("step", step=1)
    pending[0] = True  # worker 1's batch never arrives
    for _ in range(2):
        w1.tick()
        chief.tick()
    assert out.getvalue() == ""
    clock.t += 3.0
    # The chief asks worker 1 for its stack; worker 1 answers on its next poll.
    t = threading.Thread(target=lambda: (time.sleep(0.05), w1.tick()))
    t.start()
    chief.tick()
    t.join()
    text = out.getvalue()
    assert text.startswith(
        "tfdist_opt: stall: worker 1 has been at step 1 (input) for 3 s; worker 0 "
        "waits in step 1's all-reduce. worker 1's stack: STACK of 1"
    ), text
    clock.t += 1.0
    chief.tick()
    assert text == out.getvalue()  # at most once per stall_warn_s
    assert json.loads(store.values["ns/1/progress/1"])["phase"] == "input"


def test_missing_stack_says_why():
    store, clock = ThreadStore(), Clock()
    chief, out, _ = make(0, store, clock)
    w1, _, _ = make(1, store, clock)
    w1.local.enter("callbacks", step=1)
    chief.local.enter("callbacks", step=1)
    chief.local.enter("step", step=2)
    w1.tick()  # then it stops answering
    chief.tick()
    clock.t += 3.0
    chief.tick()
    # Another host (another published identity): its pid is not looked up here.
    assert (
        "worker 1's stack: unavailable: none arrived within 0.3 s (process "
        "4243 on host elsewhere at 10.0.0.2:2222, another host: its state "
        "cannot be read from here;"
    ) in out.getvalue()


def test_abort_every_worker_exits_with_the_stall_code():
    store, clock = ThreadStore(), Clock()
    chief, out0, codes0 = make(0, store, clock, abort_s=8.0)
    w1, out1, codes1 = make(1, store, clock, abort_s=8.0)
    chief.local.enter("callbacks", step=4)
    chief.local.enter("step", step=5)
    w1.local.enter("callbacks", step=4)
    w1.tick()
    chief.tick()
    clock.t += 8.0
    t = threading.Thread(target=lambda: (time.sleep(0.05), w1.tick()))
    t.start()
    chief.tick()
    t.join()
    assert codes0 == [43] and codes1 == [43]
    assert (
        "aborting after a stall of 8 s (stall_abort_s=8): worker 1 has been at "
        "step 4 (callbacks) for 8 s" in out0.getvalue()
    )
    assert out1.getvalue().startswith(
        "tfdist_opt: stall: worker 1 exits with code 43: the chief aborted a stall "
        "of 8 s (stall_abort_s=8): worker 1 has been at step 4"
    )


def test_the_chief_behind_reports_its_own_stack():
    store, clock = ThreadStore(), Clock()
    chief, out, _ = make(0, store, clock)
    w1, _, _ = make(1, store, clock)
    chief.local.enter("callbacks", step=1)
    w1.local.enter("callbacks", step=1)
    w1.local.enter("step", step=2)
    w1.tick()
    chief.tick()
    clock.t += 3.5
    chief.tick()
    assert (
        "worker 0 has been at step 1 (callbacks) for 4 s; worker 1 waits in step "
        "2's all-reduce. worker 0's stack: STACK of 0" in out.getvalue()
    )


def test_records_are_written_only_on_change_and_stop_publishes_done():
    store, clock = ThreadStore(), Clock()
    w1, _, _ = make(1, store, clock)
    writes = []
    put = store.put
    store.put = lambda k, v: (writes.append(k), put(k, v))
    w1.local.enter("step", step=1)
    for _ in range(5):
        w1.tick()
    assert writes == ["ns/1/progress/1"]
    w1.stop()
    assert json.loads(store.values["ns/1/progress/1"])["phase"] == "done"


def test_thread_runs_and_stops():
    store = ThreadStore()
    insp = inspector_lib.Inspector(
        inspector_lib.LocalProgress(), 1, NAMES, store, "ns/2", warn_s=0.4, out=io.StringIO()
    )
    insp.start()
    insp.local.enter("step", step=1)
    deadline = time.monotonic() + 5
    while "ns/2/progress/1" not in store.values:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    insp.stop()
    assert not insp._thread.is_alive()


def test_own_stacks_show_every_thread():
    ready, done = threading.Event(), threading.Event()
    texts = []

    def sleeper_in_input():
        ready.set()
        done.wait(5)

    def inspector_thread():  # left out of its own dump
        texts.append(stacks.own_stacks())

    t = threading.Thread(target=sleeper_in_input, name="input-thread")
    t.start()
    ready.wait()
    t2 = threading.Thread(target=inspector_thread, name="inspector")
    t2.start()
    t2.join()
    done.set()
    t.join()
    text = texts[0]
    assert text.startswith("Thread MainThread")
    assert "Thread input-thread" in text and "in sleeper_in_input" in text
    assert "Thread inspector" not in text


def test_stopped_process_state_from_proc():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        os.kill(p.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 5
        here = stacks.host_identity()
        while stacks.process_state(p.pid, here) != "stopped (state T: SIGSTOP)":
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert stacks.unavailable_reason(p.pid, stacks.hostname(), here, 2.0) == (
            f"unavailable: process {p.pid} is stopped (state T: SIGSTOP), so it "
            "cannot report its stack or its latest position"
        )
        # Same host name, another kernel or network namespace (another host,
        # a container): the pid means nothing here, so /proc is not read.
        assert stacks.process_state(p.pid, here + "x") is None
        assert stacks.process_state(p.pid, "") is None
        reason = stacks.unavailable_reason(
            p.pid, stacks.hostname(), here + "x", 2.0, "198.18.0.11:2222"
        )
        assert "stopped" not in reason and "another host" in reason
        assert f"on host {stacks.hostname()} at 198.18.0.11:2222" in reason
    finally:
        p.kill()
        p.wait(timeout=10)


def test_a_late_record_is_not_reported_as_a_stall():
    store, clock = ThreadStore(), Clock()
    chief, out, _ = make(0, store, clock)
    w1, _, _ = make(1, store, clock)
    chief.local.enter("callbacks", step=1)
    chief.local.enter("step", step=2)
    w1.local.enter("callbacks", step=1)
    w1.tick()
    chief.tick()
    w1.local.enter("step", step=2)  # moved on; its record not yet republished
    clock.t += 3.0
    t = threading.Thread(target=lambda: (time.sleep(0.05), w1._follow()))
    t.start()
    chief.tick()
    t.join()
    assert out.getvalue() == ""


class MissRecordingStore(ThreadStore):
    """Records reads of absent keys (they stay pending in TF's service)."""

    def __init__(self):
        super().__init__()
        self.misses = []

    def get(self, key, timeout_s):
        if key not in self.values:
            self.misses.append(key)
        return super().get(key, timeout_s)


def test_every_polled_key_exists_before_it_is_read():
    store, clock = MissRecordingStore(), Clock()
    chief, out, codes0 = make(0, store, clock, abort_s=6.0)
    w1, _, codes1 = make(1, store, clock, abort_s=6.0)
    for insp in (chief, w1):
        insp.create_keys()
    chief.local.enter("callbacks", step=1)
    chief.local.enter("step", step=2)
    w1.local.enter("callbacks", step=1)
    for _ in range(2):
        w1.tick()
        chief.tick()
    clock.t += 3.0  # warn: asks for worker 1's stack
    t = threading.Thread(target=lambda: (time.sleep(0.05), w1.tick()))
    t.start()
    chief.tick()
    t.join()
    clock.t += 3.0  # abort: waits for worker 1's acknowledgement
    t = threading.Thread(target=lambda: (time.sleep(0.05), w1.tick()))
    t.start()
    chief.tick()
    t.join()
    assert "worker 1's stack: STACK of 1" in out.getvalue()
    assert codes0 == [43] and codes1 == [43]
    assert store.misses == []


def test_host_identity_differs_between_network_namespaces():
    """Emulated hosts share the kernel and host name, not the network namespace."""
    from tests.hosts import testbed as testbed_lib

    reason = testbed_lib.unavailable_reason()
    if reason:
        pytest.skip(reason)
    here = stacks.host_identity()
    assert here.count("/net:") == 1
    with testbed_lib.TestBed(1, rate=None) as bed:
        there = bed.run(
            0,
            [
                sys.executable,
                "-c",
                "from tfdist_opt.stall import stacks;print(stacks.host_identity())",
            ],
        ).stdout.strip()
    assert there.split("/")[0] == here.split("/")[0]  # one kernel boot
    assert there != here


def test_collective_timeout_aborts_a_step_once_and_never_an_input_wait():
    store, clock = ThreadStore(), Clock()
    aborted = []
    pending = [False]
    insp = inspector_lib.Inspector(
        inspector_lib.LocalProgress(clock),
        1,
        NAMES,
        store,
        "ns/1",
        warn_s=3.0,
        input_pending=lambda: pending[0],
        clock=clock,
        out=io.StringIO(),
        exit_fn=lambda code: None,
        collective_timeout_s=10.0,
        abort_collectives=aborted.append,
    )
    insp.local.enter("step", step=7)
    pending[0] = True  # waiting for its own batch: no collective yet
    clock.t += 30.0
    insp.check_deadline()
    assert aborted == []
    pending[0] = False
    insp.local.enter("step", step=8)
    clock.t += 9.5
    insp.check_deadline()
    assert aborted == []
    clock.t += 1.0
    insp.check_deadline()
    insp.check_deadline()
    assert aborted == [
        "worker 1's train step 8 has run 10 s (collective_timeout_s=10): "
        "its collectives are aborted (DeadlineExceededError)"
    ]
    assert insp.messages == aborted
