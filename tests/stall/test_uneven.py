"""Uneven inputs: the warning and when it applies (pure)."""

from tfdist_opt.stall import uneven

NAMES = {0: "worker 0", 1: "worker 1", 2: "worker 2"}


def test_equal_lengths_need_nothing():
    assert uneven.decide({0: 10, 1: 10}, NAMES) is None
    assert uneven.decide({0: None, 1: None}, NAMES) is None


def test_known_lengths_name_workers_counts_and_unused_batches():
    text = uneven.decide({0: 10, 1: 7, 2: 9}, NAMES)
    assert text.startswith(
        "tfdist_opt: uneven inputs: batches per epoch: worker 0: 10, "
        "worker 1: 7, worker 2: 9. Each epoch runs until the last "
        "worker's input runs out"
    )
    assert "(steps without a batch per epoch: worker 1 3, worker 2 1)" in text


def test_one_unknown_length_is_uneven_too():
    text = uneven.decide({0: 10, 1: None}, NAMES)
    assert "worker 0: 10, worker 1: unknown." in text and "without a batch" not in text
