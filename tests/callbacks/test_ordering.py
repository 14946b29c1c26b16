"""Callback ordering rules, on stand-in classes named like the real ones."""

import pytest

from tfdist_opt.callbacks import ordering


def _cls(name, base=object):
    return type(name, (base,), {})()


def test_ordered_puts_ours_first_in_canonical_order():
    tb, csv = _cls("TensorBoard"), _cls("CSVLogger")
    tm, lr = _cls("ThroughputMonitor"), _cls("ScaledLearningRate")
    bk, cp = _cls("DistributedBackupAndRestore"), _cls("CommunicationProfiler")
    got = ordering.ordered([tb, tm, csv, cp, lr, bk])
    assert got == [bk, lr, cp, tm, tb, csv]


def test_check_order_says_what_to_move():
    tb, tm = _cls("TensorBoard"), _cls("ThroughputMonitor")
    with pytest.raises(ValueError, match=r"Move ThroughputMonitor before TensorBoard"):
        ordering.check_order([tb, tm])
    ordering.check_order([tm, tb])


def test_subclasses_follow_base_rules():
    Base = type("ThroughputMonitor", (), {})
    mine = type("MyMonitor", (Base,), {})()
    with pytest.raises(ValueError, match="MyMonitor"):
        ordering.check_order([_cls("EarlyStopping"), mine])


@pytest.mark.parametrize(
    "ours, theirs",
    [
        ("DistributedBackupAndRestore", "BackupAndRestore"),
        ("ScaledLearningRate", "LearningRateScheduler"),
        ("ScaledLearningRate", "ReduceLROnPlateau"),
    ],
)
def test_conflicts(ours, theirs):
    with pytest.raises(ValueError, match="cannot be used together"):
        ordering.ordered([_cls(ours), _cls(theirs)])
