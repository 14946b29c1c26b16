"""Progress lines for the benchmark binaries: one per finished unit, with an ETA.

A benchmark on a busy machine can run for many minutes; each binary prints
`progress K/N (P%) LABEL: elapsed E, ETA R` (chief only) after every round
of every setting, so a person can see it is alive and when it will end.
The ETA is the mean time per finished unit times the units left (the first
units include warm-up and tracing, so early ETAs run high). Pure Python.
"""

from __future__ import annotations

import sys
import time
from typing import IO, Callable


def format_seconds(seconds: float) -> str:
    """`42s`, `3m05s`, `1h02m`."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


class Progress:
    """Counts finished units of work and prints one line per unit.

    Args:
        total: int. Units expected (>= 1).
        enabled: bool. Print (the chief) or stay silent (other workers).
            Defaults to `True`.
        out: text stream. Defaults to `sys.stdout`.
        clock: callable returning seconds. Defaults to `time.monotonic`.

    Example:
        >>> p = Progress(4, enabled=False, clock=iter([0, 10, 20]).__next__)
        >>> p.done("round 1/2 baseline")
        'progress 1/4 (25%) round 1/2 baseline: elapsed 10s, ETA 30s'
    """

    def __init__(
        self,
        total: int,
        enabled: bool = True,
        out: IO[str] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        if isinstance(total, bool) or not isinstance(total, int) or total < 1:
            raise ValueError(
                f"Invalid value for `total`: expected an int >= 1. Received: total={total!r}"
            )
        self.total = total
        self.enabled = enabled
        self.count = 0
        self._out = out
        self._clock = clock
        self._start = clock()

    def line(self, label: str) -> str:
        elapsed = self._clock() - self._start
        left = max(0, self.total - self.count)
        eta = elapsed / self.count * left if self.count else 0.0
        pct = min(100, round(100 * self.count / self.total))
        return (
            f"progress {self.count}/{self.total} ({pct}%) {label}: "
            f"elapsed {format_seconds(elapsed)}, ETA {format_seconds(eta)}"
        )

    def done(self, label: str) -> str:
        """Marks one unit finished; prints and returns its line."""
        self.count += 1
        text = self.line(label)
        if self.enabled:
            out = self._out if self._out is not None else sys.stdout
            print(text, file=out, flush=True)
        return text
