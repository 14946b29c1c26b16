"""Pure timing statistics."""

import numpy as np
import pytest

from tfdist_opt.callbacks import stats


@pytest.mark.parametrize("q", [0, 10, 50, 90, 100])
def test_percentile_matches_numpy(q):
    data = [0.3, 0.1, 0.7, 0.2, 0.9, 0.4, 0.5]
    assert stats.percentile(data, q) == pytest.approx(np.percentile(data, q))


def test_percentile_rejects_bad_input():
    with pytest.raises(ValueError, match=r"values=\[\]"):
        stats.percentile([], 50)
    with pytest.raises(ValueError, match="q=101"):
        stats.percentile([1.0], 101)


def test_window_keeps_last_n():
    w = stats.Window(3)
    for t in (1.0, 2.0, 3.0, 4.0):
        w.add(t, 10)
    assert w.times == [2.0, 3.0, 4.0]
    assert w.examples_per_sec() == pytest.approx(30 / 9)
    assert w.median() == 3.0
    with pytest.raises(ValueError, match="window=0"):
        stats.Window(0)


def test_jitter():
    assert stats.jitter([1.0, 1.0, 1.0]) == 0.0
    assert stats.jitter([1.0] * 9 + [11.0]) == pytest.approx(1.0)


def test_plateau():
    assert not stats.plateau_reached([100.0], 0.05)
    assert not stats.plateau_reached([100.0, 200.0, 300.0], 0.05)
    assert stats.plateau_reached([100.0, 200.0, 204.0], 0.05)
    assert stats.plateau_reached([100.0, 200.0, 150.0], 0.0)
