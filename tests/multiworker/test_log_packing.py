"""Keras's logged values cross workers in one collective a step, unchanged.

2 real workers fit a classifier with the loss and 3 metrics twice, from the
same weights: logs reduced one value at a time (upstream Keras's path) and
packed. The per-step logs must be
equal bit for bit, and the traced step (Keras's `train_step` and its log
reduction) must hold 3 collectives fewer (4 log reductions become 1). Inside
`fit` the logs need none: each is computed from the all-reduced metric
state (`tfdist_opt.keras.metric_logs`).
"""

import pytest

from tests.multiworker import harness

pytestmark = pytest.mark.multiworker

SCRIPT = "tests/multiworker/scripts/log_pack.py"


@pytest.fixture(scope="module")
def runs():
    return harness.results_by_mode(harness.run_workers(2, [SCRIPT], timeout_s=180))


def test_packed_logs_equal_the_per_value_logs_every_step(runs):
    for worker in runs:
        per_value, packed = worker["per_value"]["logs"], worker["packed"]["logs"]
        assert len(packed) == 8  # 2 epochs x 4 steps
        assert set(packed[0]) == {
            "loss",
            "sparse_categorical_accuracy",
            "sparse_top_k_categorical_accuracy",
            "sparse_categorical_crossentropy",
        }
        assert packed == per_value
        # `fit`'s own step logs its metrics computed from the all-reduced
        # metric state (`metric_logs`), equal on every worker: no log value
        # is left to reduce, packed or not. (The traced step below, Keras's
        # `train_step` on its own, still packs.)
        assert worker["packed"]["fit_packed"] == 0
        assert worker["per_value"]["fit_packed"] == 0
        assert worker["packed"]["weights"] == worker["per_value"]["weights"]
    assert runs[0]["packed"]["logs"] == runs[1]["packed"]["logs"]


def test_four_log_reductions_become_one_collective(runs):
    for worker in runs:
        per_value = worker["per_value"]["collectives"]
        packed = worker["packed"]["collectives"]
        assert per_value - packed == 3, (per_value, packed)
