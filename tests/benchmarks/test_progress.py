"""benchmarks/progress.py: one line per finished unit, elapsed and ETA."""

import io

import pytest

from benchmarks import progress


def test_lines_count_up_with_a_mean_based_eta():
    out = io.StringIO()
    ticks = iter([100.0, 110.0, 130.0, 160.0])
    p = progress.Progress(3, out=out, clock=lambda: next(ticks))
    assert p.done("round 1/3 baseline") == (
        "progress 1/3 (33%) round 1/3 baseline: elapsed 10s, ETA 20s"
    )
    assert p.done("round 2/3 baseline") == (
        "progress 2/3 (67%) round 2/3 baseline: elapsed 30s, ETA 15s"
    )
    assert p.done("round 3/3 baseline").endswith("(100%) round 3/3 baseline: elapsed 1m00s, ETA 0s")
    assert out.getvalue().count("\n") == 3


def test_silent_when_disabled_and_never_past_100_percent():
    out = io.StringIO()
    ticks = iter([0.0, 1.0, 2.0])
    p = progress.Progress(1, enabled=False, out=out, clock=lambda: next(ticks))
    p.done("a")
    assert p.done("b").startswith("progress 2/1 (100%) b:")
    assert out.getvalue() == ""


@pytest.mark.parametrize(
    "seconds,text", [(0, "0s"), (59.4, "59s"), (65, "1m05s"), (3725, "1h02m"), (-3, "0s")]
)
def test_format_seconds(seconds, text):
    assert progress.format_seconds(seconds) == text


def test_total_must_be_positive():
    with pytest.raises(ValueError, match=r"`total`: expected an int >= 1. Received: total=0"):
        progress.Progress(0)
