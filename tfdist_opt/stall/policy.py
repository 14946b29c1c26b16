"""Who is behind, since when, and what to say: the stall decision, pure.

Each worker of a multi-worker `fit` publishes one `Progress` record (see
`tfdist_opt.stall.inspector`). Every worker runs the same hooks in the same
order (synchronous training), so `seq`, the count of progress events in this
`fit`, orders workers: the one with the smallest `(seq, phase rank)` is
behind, and the others wait for it. `assess` turns the records and a clock
reading into a `Stall` (or None); `StallPolicy` decides when to warn (once
when a stall reaches `warn_s`, then at most every `warn_s`) and when to abort
(`abort_s`); `describe` writes the message.

Pure Python: no TensorFlow, no clock of its own (`now` is passed in), so the
whole policy is tested in milliseconds with hand-written records.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Mapping, Sequence

PHASES = ("input", "step", "callbacks", "saving", "validation", "done")
# Within one `seq`, a worker still waiting for its batch is behind one whose
# batch arrived (both entered the train step at the same event).
_RANK = {"input": 0}

WARN, ABORT = "warn", "abort"


@dataclasses.dataclass(frozen=True)
class Progress:
    """One worker's published position in the current `fit`.

    Attributes:
        task: int. Position in the collective group (0 = the chief).
        seq: int. Progress events so far in this `fit` (the same sequence of
            events on every worker).
        step: int. Train steps begun in this `fit` (1 = the first; 0 before it).
        phase: str. One of `PHASES`: `input` (in the train step, its batch
            not there yet), `step` (the batch arrived: compute and
            all-reduce), `callbacks` (Keras callbacks around a step or an
            epoch), `saving` (a model or backup save), `validation`, `done`.
        since: float. Wall-clock time (seconds) this position began.
        pid: int. The worker's process id.
        host: str. The worker's host name.
        host_id: str. The worker's `stacks.host_identity()` (whether its pid
            can be looked up in another worker's `/proc`).
    """

    task: int
    seq: int
    step: int
    phase: str
    since: float
    pid: int = 0
    host: str = ""
    host_id: str = ""

    def key(self) -> tuple[int, int]:
        return (self.seq, _RANK.get(self.phase, 1))

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> "Progress":
        return cls(**json.loads(text))


@dataclasses.dataclass(frozen=True)
class Stall:
    """Workers that have not advanced while others wait for them.

    Attributes:
        behind: tuple of `Progress`. The workers furthest behind (all at one
            position); every worker when nobody is ahead.
        waiting: tuple of `Progress`. The workers ahead of them.
        missing: tuple of int. Tasks that published nothing yet (not in
            `fit`), also behind.
        since: float. When the stall began (wall clock).
        duration: float. Seconds since then, at the time of `assess`.
    """

    behind: tuple[Progress, ...]
    waiting: tuple[Progress, ...]
    missing: tuple[int, ...]
    since: float
    duration: float

    def identity(self) -> tuple:
        """Same value while the same workers stay at the same position."""
        return (tuple((p.task, p.seq, p.phase) for p in self.behind), self.missing)


def assess(records: Mapping[int, Progress], tasks: Sequence[int], now: float) -> Stall | None:
    """The current stall, or None when every worker is done or none published.

    Args:
        records: mapping. Task -> its latest `Progress`.
        tasks: sequence of int. Every task of the collective group.
        now: float. Wall-clock time.

    Returns:
        A `Stall` (of any duration; the caller compares it to its
        thresholds), or None.
    """
    present = [records[t] for t in tasks if t in records]
    if not present or all(p.phase == "done" for p in present):
        return None
    missing = tuple(t for t in tasks if t not in records)
    if missing:
        waiting = tuple(present)
        since = max(p.since for p in waiting)
        return Stall((), waiting, missing, since, now - since)
    low = min(p.key() for p in present)
    behind = tuple(p for p in present if p.key() == low)
    waiting = tuple(p for p in present if p.key() != low)
    if waiting and all(p.phase == "done" for p in waiting):
        return None  # the others left fit: nobody waits for the last one
    since = max(p.since for p in behind)
    return Stall(behind, waiting, (), since, now - since)


class StallPolicy:
    """When to warn and when to abort, from successive `assess` results.

    Args:
        warn_s: float. A stall of this many seconds is reported; the same
            stall again every `warn_s` seconds.
        abort_s: float or None. A stall of this many seconds aborts (once).
    """

    def __init__(self, warn_s: float, abort_s: float | None = None):
        self.warn_s = warn_s
        self.abort_s = abort_s
        self._identity = None
        self._last_warn: float | None = None
        self._aborted = False

    def update(self, stall: Stall | None, now: float) -> str | None:
        """`WARN`, `ABORT` or None for this reading."""
        if stall is None or stall.duration < self.warn_s:
            self._identity, self._last_warn = None, None
            return None
        if self.abort_s and stall.duration >= self.abort_s and not self._aborted:
            self._aborted = True
            return ABORT
        if stall.identity() != self._identity:
            self._identity, self._last_warn = stall.identity(), None
        if self._last_warn is None or now - self._last_warn >= self.warn_s:
            self._last_warn = now
            return WARN
        return None


# ------------------------------------------------------------- messages
def _join(items: Sequence[str]) -> str:
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _who(names: Mapping[int, str], tasks: Sequence[int]) -> str:
    """`worker 1`, `workers 0 and 2`, `chief 0 and worker 1`."""
    labels = [names.get(t, f"worker {t}") for t in tasks]
    roles = {label.split(" ")[0] for label in labels}
    if len(roles) == 1 and len(labels) > 1:
        role = roles.pop()
        return f"{role}s " + _join([label.split(" ", 1)[1] for label in labels])
    return _join(labels)


def where(p: Progress) -> str:
    """`step 41 (input)`; `before the first step (callbacks)`."""
    at = f"step {p.step}" if p.step else "the start of fit"
    return f"{at} ({p.phase})"


def _waits(p: Progress) -> str:
    if p.phase == "step":
        return f"wait in step {p.step}'s all-reduce"
    if p.phase == "input":
        return f"wait for step {p.step}'s batch"
    if p.phase == "done":
        return "finished fit"
    if p.phase == "validation":
        return f"wait in validation after step {p.step}"
    return f"wait at {where(p)}"


def _group(records: Sequence[Progress], text) -> list[tuple[str, list[int]]]:
    groups: dict[str, list[int]] = {}
    for p in records:
        groups.setdefault(text(p), []).append(p.task)
    return list(groups.items())


def describe(stall: Stall, names: Mapping[int, str] | None = None) -> str:
    """One sentence: who is behind, where, for how long; who waits where.

    Example:
        `worker 1 has been at step 41 (input) for 63 s; workers 0 and 2 wait
        in step 41's all-reduce.`
    """
    names = names or {}
    secs = f"{stall.duration:.0f} s"
    parts = []
    if stall.missing:
        who = _who(names, stall.missing)
        verb = "has" if len(stall.missing) == 1 else "have"
        parts.append(f"{who} {verb} not started fit (no progress published) for {secs}")
    elif not stall.waiting:
        parts.append(
            f"no worker has advanced for {secs}: "
            + "; ".join(
                f"{_who(names, tasks)} at {text}" for text, tasks in _group(stall.behind, where)
            )
            + " (a collective or computation that does not finish, "
            "or a slow step)"
        )
    else:
        for text, tasks in _group(stall.behind, where):
            verb = "has" if len(tasks) == 1 else "have"
            parts.append(f"{_who(names, tasks)} {verb} been at {text} for {secs}")
    for text, tasks in _group(stall.waiting, _waits):
        if len(tasks) == 1 and not text.startswith("finished"):
            text = text.replace("wait ", "waits ", 1)
        parts.append(f"{_who(names, tasks)} {text}")
    return "; ".join(parts) + "."


def laggards(stall: Stall) -> list[int]:
    """Tasks behind (whose stack explains the stall)."""
    if not stall.waiting:
        return []
    return list(stall.missing) + [p.task for p in stall.behind]
