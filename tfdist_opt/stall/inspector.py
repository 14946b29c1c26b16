"""The stall inspector: publish progress, decide on the chief, name the stuck worker.

One `Inspector` per worker per `fit`, with one background thread. The
training thread only swaps a tuple in `LocalProgress`
(`tfdist_opt.stall.local_progress`; no I/O, no lock); the thread does
everything else, every `poll_s` seconds, through the coordination service's key-value store
(`tfdist_opt.coordination.kv_store`; no collective):

- every worker writes its `Progress` record when it changed
  (`<ns>/progress/<task>`) and reads the chief's verdict (`<ns>/verdict`);
  every key is written before anyone reads it (`create_keys`): a read of
  an absent key would stay pending in the service after its timeout;
- the chief reads every record, runs `policy.assess` and `StallPolicy`,
  and on a warning asks the workers behind for their stacks (in the
  verdict), waits up to `stack_wait_s` for them (`<ns>/stack/<task>`) and
  prints one message (`tfdist_opt: stall: ...`; the launcher prefixes it
  `[worker 0]`);
- on an abort the chief writes the abort into the verdict; every worker
  prints one line and exits with `STALL_EXIT_CODE`, from the inspector
  thread (the training thread is blocked). The chief waits up to
  `stack_wait_s` for the others' acknowledgements first, so its exit does
  not take the key-value store away before they read the verdict.

RPCs per poll: one read and at most one write per worker, plus one read per
worker on the chief: O(workers), not O(workers^2).

The same thread enforces `collective_timeout_s` (every worker, before any
RPC, so a lost store cannot delay it): when this worker's train step has
run longer than that with its batch there, it aborts the process's
collectives (`abort_collectives`, TF's `abort_collective_ops` with
DEADLINE_EXCEEDED), so the step raises `DeadlineExceededError` as TF's own
per-collective timeout would. TF's own starts one OS thread per collective
that sleeps out the whole timeout (thousands of threads over a run with a
60 s timeout); this is one thread per worker.

Pure Python: the store, clocks, the input probe and the exit are injected.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Callable, Mapping, TextIO

from tfdist_opt.stall import policy as policy_lib
from tfdist_opt.stall.local_progress import LocalProgress
from tfdist_opt.stall import stacks as stacks_lib

STALL_EXIT_CODE = 43  # next to preemption's 42; any non-zero code restarts a launch
PREFIX = "tfdist_opt: stall: "
_NS_LOCK = threading.Lock()
_NS_SEQ = [0]


def next_namespace() -> str:
    """`tfdist_opt/stall/<n>` for this process's n-th inspected fit."""
    with _NS_LOCK:
        _NS_SEQ[0] += 1
        return f"tfdist_opt/stall/{_NS_SEQ[0]}"


def poll_interval(warn_s: float) -> float:
    """Seconds between polls: a quarter of `warn_s`, at most 1."""
    return min(1.0, warn_s / 4.0)


def _stopped(record: policy_lib.Progress) -> bool:
    """The worker's process is stopped (SIGSTOP), as far as this host can tell."""
    state = stacks_lib.process_state(record.pid, record.host_id)
    return state is not None and state.startswith("stopped")


def _hard_exit(code: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)  # pylint: disable=protected-access


class Inspector:
    """One worker's stall inspector for one `fit` (see the module docstring).

    Args:
        local: `LocalProgress`. Written by the training thread.
        task: int. This worker's position in the group (0 = the chief).
        names: mapping. Task -> label (`worker 1`), every task of the group.
        store: `KeyValueStore` with `put`. The coordination service's.
        namespace: str. Key prefix of this fit (`next_namespace`).
        warn_s: float. `StrategyConfig.stall_warn_s`.
        abort_s: float or None. `StrategyConfig.stall_abort_s`.
        input_pending: callable or None. True while the current train step
            still waits for its batch (labels phase `step` as `input`).
        clock: callable. Wall-clock seconds of records and stall durations
            (waits for stacks and acknowledgements use `time.monotonic`).
            Defaults to `time.time`.
        out: text stream for messages. Defaults to `sys.stderr`.
        exit_fn: callable. Ends the process with a code. Defaults to
            flushing and `os._exit`.
        stack_fn: callable. This process's stacks. Defaults to
            `stacks.own_stacks`.
        poll_s: float or None. Defaults to `poll_interval(warn_s)`.
        pid, host, host_id: what this worker publishes about its process
            (`stacks.hostname()`, `stacks.host_identity()` by default).
        addresses: mapping or None. Task -> `host:port`, named when a
            worker's stack does not arrive.
        collective_timeout_s: float or None. `StrategyConfig.collective_timeout_s`.
        abort_collectives: callable or None. Takes a message; aborts this
            process's collectives (needed with `collective_timeout_s`).
    """

    def __init__(
        self,
        local: LocalProgress,
        task: int,
        names: Mapping[int, str],
        store,
        namespace: str,
        warn_s: float,
        abort_s: float | None = None,
        *,
        input_pending: Callable[[], bool] | None = None,
        clock: Callable[[], float] = time.time,
        out: TextIO | None = None,
        exit_fn: Callable[[int], None] = _hard_exit,
        stack_fn: Callable[[], str] = stacks_lib.own_stacks,
        poll_s: float | None = None,
        pid: int | None = None,
        host: str | None = None,
        host_id: str | None = None,
        addresses: Mapping[int, str] | None = None,
        collective_timeout_s: float | None = None,
        abort_collectives: Callable[[str], None] | None = None,
    ):
        self.local, self.task, self.names = local, task, dict(names)
        self.tasks = sorted(self.names)
        self.store, self.ns = store, namespace
        self.warn_s, self.abort_s = warn_s, abort_s
        self.policy = policy_lib.StallPolicy(warn_s, abort_s)
        self.input_pending = input_pending
        self.clock, self.out = clock, out
        self.exit_fn, self.stack_fn = exit_fn, stack_fn
        self.poll_s = poll_s or poll_interval(warn_s)
        self.stack_wait_s = 2 * self.poll_s + 2.0  # a loaded host starves threads
        self.read_timeout_s = min(0.05, self.poll_s / 4)
        self.pid = os.getpid() if pid is None else pid
        self.host = stacks_lib.hostname() if host is None else host
        self.host_id = stacks_lib.host_identity() if host_id is None else host_id
        self.addresses = dict(addresses or {})
        self.collective_timeout_s = collective_timeout_s
        self.abort_collectives = abort_collectives
        self._deadline_fired = False
        self._published = None
        self._seen: dict[int, policy_lib.Progress] = {}
        self._verdict_n = 0  # chief: verdicts written
        self._handled_n = 0  # every worker: verdicts acted on
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.messages: list[str] = []  # what this inspector printed

    # ------------------------------------------------------------ keys
    def _key(self, kind: str, task: int | None = None) -> str:
        return f"{self.ns}/{kind}" + ("" if task is None else f"/{task}")

    # ---------------------------------------------------------- thread
    def create_keys(self) -> None:
        """Writes this worker's keys (and the verdict, first writer wins) before
        any worker reads them.

        A read of an absent key stays pending in the coordination service
        after its timeout, so every key the thread polls exists first; call
        on every worker before any `start` (`keras_binding` does, before the
        epoch-length agreement every worker waits for).
        """
        self.store.set(self._key("verdict"), json.dumps({"n": 0}))
        self.store.put(self._key("stack", self.task), json.dumps({"n": 0, "text": ""}))
        self.store.put(self._key("ack", self.task), "0")
        self.publish()

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._run, daemon=True, name="tfdist_opt-stall-inspector"
        )
        self._thread.start()

    def stop(self) -> None:
        """Publishes `done` and ends the thread (idempotent)."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.stack_wait_s + 2 * self.poll_s)
        self.local.enter("done")
        # The store may be gone or frozen (a SIGSTOPped chief hosts the
        # coordination service): a put would then block this process's exit
        # forever, so it runs in a daemon thread with a bounded wait.
        done = threading.Thread(
            target=self._publish_quietly, daemon=True, name="tfdist_opt-stall-done"
        )
        done.start()
        done.join(timeout=self.poll_s + 2.0)

    def _publish_quietly(self) -> None:
        try:
            self.publish()
        except Exception:  # pylint: disable=broad-except
            pass  # the store may be gone at shutdown

    def _run(self) -> None:
        failures = 0
        while not self._stop.wait(self.poll_s):
            try:
                self.tick()
                failures = 0
            except Exception as e:  # pylint: disable=broad-except
                failures += 1
                if failures == 3:  # say it once; keep trying
                    self._print(
                        f"inspector cannot reach the key-value store "
                        f"({type(e).__name__}: {e}); retrying"
                    )

    # ------------------------------------------------------------ tick
    def current(self) -> policy_lib.Progress:
        seq, step, phase, since = self.local.state
        if phase == "step" and self.input_pending is not None and self.input_pending():
            phase = "input"
        return policy_lib.Progress(
            self.task, seq, step, phase, since, self.pid, self.host, self.host_id
        )

    def publish(self) -> policy_lib.Progress:
        record = self.current()
        mark = (record.seq, record.phase, record.since)
        if mark != self._published:
            self.store.put(self._key("progress", self.task), record.to_json())
            self._published = mark
        return record

    def tick(self) -> None:
        """One poll: the collective deadline, publish, then decide (chief) or
        follow the verdict."""
        self.check_deadline()
        mine = self.publish()
        if self.task == self.tasks[0]:
            self._decide(mine)
        else:
            self._follow()

    def check_deadline(self) -> None:
        """Aborts this worker's collectives once its step passed `collective_timeout_s`."""
        if not self.collective_timeout_s or self.abort_collectives is None or self._deadline_fired:
            return
        record = self.current()
        waited = self.clock() - record.since
        if record.phase != "step" or waited < self.collective_timeout_s:
            return
        self._deadline_fired = True
        label = self.names.get(self.task, f"worker {self.task}")
        message = (
            f"{label}'s train step {record.step} has run {waited:.0f} s "
            f"(collective_timeout_s={self.collective_timeout_s:g}): its "
            "collectives are aborted (DeadlineExceededError)"
        )
        self._print(message)
        self.abort_collectives(message)

    def _decide(self, mine: policy_lib.Progress) -> None:
        records = {self.task: mine}
        for t in self.tasks:
            if t == self.task:
                continue
            text = self.store.get(self._key("progress", t), self.read_timeout_s)
            if text:
                self._seen[t] = policy_lib.Progress.from_json(text)
        records.update(self._seen)
        now = self.clock()
        stall = policy_lib.assess(records, self.tasks, now)
        action = self.policy.update(stall, now)
        if action == policy_lib.WARN:
            message = self.warning(stall)
            if message is not None:
                self._print(message)
        elif action == policy_lib.ABORT:
            self._abort(stall)

    def _write_verdict(self, **fields) -> int:
        self._verdict_n += 1
        self.store.put(self._key("verdict"), json.dumps({"n": self._verdict_n, **fields}))
        return self._verdict_n

    def warning(self, stall: policy_lib.Stall) -> str | None:
        """The chief's message: `describe` plus each worker-behind's stack.

        None when a worker behind answers from a later position: its record
        was only late (a starved publisher), not stuck.
        """
        text = policy_lib.describe(stall, self.names)
        behind = policy_lib.laggards(stall)
        if not behind:
            return text
        n = self._write_verdict(stack=behind)
        records = {p.task: p for p in stall.behind}
        for t in behind:
            label = self.names.get(t, f"worker {t}")
            if t == self.task:
                stack = self.stack_fn()
            else:
                stack, seq = self._await_stack(t, n, records.get(t))
                if seq is not None and t in records and seq != records[t].seq:
                    return None
            text += f" {label}'s stack: " + ("\n" + stack if "\n" in stack else stack)
        return text

    def _await_stack(self, task: int, n: int, record) -> tuple[str, int | None]:
        """(stack or why it is unavailable, the worker's seq when it answered)."""
        if record is not None and _stopped(record):
            # Nothing to wait for (and TF's heartbeat ends the job ~10 s on).
            return stacks_lib.unavailable_reason(record.pid, record.host, record.host_id, 0), None
        deadline = time.monotonic() + self.stack_wait_s
        while True:
            left = deadline - time.monotonic()
            text = self.store.get(self._key("stack", task), max(0.01, min(left, 0.25)))
            if text:
                got = json.loads(text)
                if got.get("n", 0) >= n:
                    return got["text"], got.get("seq")
            if left <= 0:
                break
            time.sleep(0.05)
        if record is None:
            return "unavailable: it has not started fit", None
        return stacks_lib.unavailable_reason(
            record.pid, record.host, record.host_id, self.stack_wait_s, self.addresses.get(task, "")
        ), None

    def _abort(self, stall: policy_lib.Stall) -> None:
        what = policy_lib.describe(stall, self.names)
        why = f"stall of {stall.duration:.0f} s (stall_abort_s={self.abort_s:g})"
        self._write_verdict(abort=why, what=what)
        self._print(
            f"aborting after a {why}: {what} Every worker exits with "
            f"code {STALL_EXIT_CODE}; `tfdist-opt launch --max-restarts "
            "R` restarts the job from its newest backup."
        )
        deadline = time.monotonic() + self.stack_wait_s
        stopped = {p.task for p in stall.behind if _stopped(p)}
        waiting = [t for t in self.tasks if t != self.task and t not in stopped]
        while waiting and time.monotonic() < deadline:
            waiting = [t for t in waiting if self.store.get(self._key("ack", t), 0.05) != "1"]
            time.sleep(0.05)
        self.exit_fn(STALL_EXIT_CODE)

    def _follow(self) -> None:
        text = self.store.get(self._key("verdict"), self.read_timeout_s)
        if not text:
            return
        verdict = json.loads(text)
        if verdict["n"] <= self._handled_n:
            return
        self._handled_n = verdict["n"]
        if verdict.get("abort"):
            self.store.put(self._key("ack", self.task), "1")
            label = self.names.get(self.task, f"worker {self.task}")
            self._print(
                f"{label} exits with code {STALL_EXIT_CODE}: the chief "
                f"aborted a {verdict['abort']}: {verdict['what']}"
            )
            self.exit_fn(STALL_EXIT_CODE)
        elif self.task in verdict.get("stack", ()):
            self.store.put(
                self._key("stack", self.task),
                json.dumps(
                    {"n": verdict["n"], "seq": self.local.state[0], "text": self.stack_fn()}
                ),
            )

    def _print(self, message: str) -> None:
        self.messages.append(message)
        out = self.out if self.out is not None else sys.stderr
        try:
            out.write(PREFIX + message + "\n")
            out.flush()
        except (OSError, ValueError):
            pass
