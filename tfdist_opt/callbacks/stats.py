"""Step-timing statistics (pure Python, no TF).

Median / percentile over a window of step times, throughput, jitter and the
plateau test `BatchSizeFinder` uses. Percentiles interpolate linearly
between order statistics, the same as `numpy.percentile`'s default.
"""

from __future__ import annotations

import collections
import math
from typing import Iterable, Sequence

from tfdist_opt import validation


def percentile(values: Iterable[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation.

    Raises:
        ValueError: `values` is empty or `q` is outside [0, 100].

    Example:
        >>> percentile([1, 2, 3, 4], 50)
        2.5
    """
    data = sorted(float(v) for v in values)
    if not data:
        raise ValueError(
            "Invalid value for `values`: expected at least one value. Received: values=[]"
        )
    if not 0 <= q <= 100:
        raise ValueError(f"Invalid value for `q`: expected a number in [0, 100]. Received: q={q!r}")
    pos = (len(data) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def median(values: Iterable[float]) -> float:
    return percentile(values, 50)


def jitter(values: Sequence[float]) -> float:
    """Spread of step times: `(p90 - median) / median` (0 for a steady job)."""
    med = median(values)
    return 0.0 if med == 0 else (percentile(values, 90) - med) / med


class Window:
    """The last `size` step times (seconds) and the examples each processed."""

    def __init__(self, size: int):
        validation.check_int("window", size, minimum=1)
        self.size = size
        self._times: collections.deque = collections.deque(maxlen=size)
        self._examples: collections.deque = collections.deque(maxlen=size)

    def add(self, seconds: float, examples: int) -> None:
        self._times.append(float(seconds))
        self._examples.append(int(examples))

    def __len__(self) -> int:
        return len(self._times)

    @property
    def times(self) -> list[float]:
        return list(self._times)

    def examples_per_sec(self) -> float:
        total = sum(self._times)
        return 0.0 if total <= 0 else sum(self._examples) / total

    def median(self) -> float:
        return median(self._times)

    def p90(self) -> float:
        return percentile(self._times, 90)


def plateau_reached(throughputs: Sequence[float], rel_tolerance: float) -> bool:
    """True when the newest throughput is not `rel_tolerance` above the best before it.

    Args:
        throughputs: sequence of float. Examples/sec per trial, in trial order.
        rel_tolerance: float. Minimum relative gain that counts as "still
            rising" (0.05: at least 5 % faster than the best earlier trial).

    Example:
        >>> plateau_reached([100, 180, 185], 0.05)
        True
        >>> plateau_reached([100, 180], 0.05)
        False
    """
    if not 0 <= rel_tolerance:
        raise ValueError(
            f"Invalid value for `rel_tolerance`: expected a "
            f"non-negative number. Received: rel_tolerance="
            f"{rel_tolerance!r}"
        )
    if len(throughputs) < 2:
        return False
    best_before = max(throughputs[:-1])
    return throughputs[-1] < best_before * (1.0 + rel_tolerance)
