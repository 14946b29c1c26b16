"""Keras's logged values ride in the gradient collective, unchanged.

2 real workers fit a classifier with the loss and 3 metrics twice from the
same weights: logs reduced one value at a time (upstream Keras's path) and
folded into the step's gradient collective (`tfdist_opt.gradients.log_fold`),
under PowerSGD (both the uncompressed and the compressed branch), our
packed uncompressed all-reduce, every default (streamed pieces, which
multi-worker strategies run through our hooks) and bf16 in streamed pieces
(the logs travel uncast beside the bf16 gradients). Per-step logs and final weights must be
equal bit for bit, the folded step must issue no log collective, and the
upstream baseline must fold nothing. A first fit with nothing set (the
shipped defaults) must fold as the "folded" mode does.
"""

import pytest

from tests.multiworker import harness

pytestmark = [pytest.mark.multiworker, pytest.mark.slow]

SCRIPT = "tests/multiworker/scripts/log_fold.py"


@pytest.fixture(scope="module", params=["powersgd", "packed", "defaults", "bf16"])
def runs(request):
    return harness.results_by_mode(harness.run_workers(2, [SCRIPT, request.param], timeout_s=240))


def test_folded_logs_equal_upstream_logs_every_step(runs):
    for worker in runs:
        upstream, folded = worker["upstream"], worker["folded"]
        assert len(folded["logs"]) == 8  # 2 epochs x 4 steps
        assert set(folded["logs"][0]) == {
            "loss",
            "sparse_categorical_accuracy",
            "sparse_top_k_categorical_accuracy",
            "sparse_categorical_crossentropy",
        }
        assert folded["logs"] == upstream["logs"]
        assert folded["weights"] == upstream["weights"]
    assert runs[0]["folded"]["logs"] == runs[1]["folded"]["logs"]


def test_folded_step_issues_no_log_collective(runs):
    for worker in runs:
        folded = worker["folded"]
        assert folded["folded"] >= 4, folded["folded"]  # 4 values a trace
        assert folded["log_collectives"] == 0
        # The baseline really is upstream's path: one collective per value.
        assert worker["upstream"]["folded"] == 0
        assert worker["upstream"]["log_collectives"] == 0  # packing off too


def test_shipped_defaults_fold_the_logs(runs):
    for worker in runs:
        shipped = worker["as_shipped"]
        assert shipped["folded"] >= 4 and shipped["log_collectives"] == 0, shipped
        assert shipped["logs"] == worker["upstream"]["logs"]
        assert shipped["weights"] == worker["upstream"]["weights"]
