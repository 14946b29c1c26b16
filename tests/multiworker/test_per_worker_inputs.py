"""Per-worker data on several replicas per worker, every example counted (issue 62).

One cluster of 2 workers with 2 CPU replicas each (`replicas=4`) runs every
case of tests/multiworker/scripts/per_worker_inputs.py; the same script
without TF_CONFIG is the one-process reference, fed the same global batches.
A metric counts the example ids the train steps used, over every replica of
both workers, each epoch: every example exactly once.

- per-worker data (auto-sharding OFF): each worker's batch is its share of
  the global batch, split over its own replicas (upstream split it over all
  4 replicas and kept its part: half of each worker's examples, silently);
- a per-worker batch its replicas cannot split is refused, and the batch the
  message suggests trains on every example;
- Ray Train's `to_tf` shape (a generator per worker, its batch size not
  known before step 1): a per-worker batch of 2 trains on every example; a
  batch of 1 its 2 replicas cannot split fails at the first batch, which
  Keras reads before step 1, with a message naming it (not weighted
  unequally, silently);
- an auto-sharded global batch of 1 is refused, and the batch the message
  suggests trains on every example;
- `strategy.distribute_datasets_from_function` given to `fit`.

Tolerance: rel 1e-5, abs 1e-6 (float32: the all-reduce adds the replicas'
parts of each batch in another order).
"""

import numpy as np
import pytest

from tests.multiworker import harness

pytestmark = [pytest.mark.multiworker, pytest.mark.slow]

SCRIPT = "tests/multiworker/scripts/per_worker_inputs.py"
EPOCHS, EXAMPLES = 2, 16


@pytest.fixture(scope="module")
def runs():
    with harness.alongside(harness.run_single, [SCRIPT], timeout_s=300) as single:
        workers = harness.run_workers(
            2, [SCRIPT], timeout_s=400, extra_env={"TFDIST_OPT_REPLICAS": "4"}
        )
        two = harness.results_by_mode(workers)
    reference = harness.results_by_mode([single.result()])[0]["reference"]
    assert "error" not in reference, reference.get("trace", reference)
    return reference, two


def _check(runs, mode):
    """Each worker's run of `mode` against the reference with its global batch."""
    reference, two = runs
    for worker in two:
        result = worker[mode]
        assert "error" not in result, result.get("trace", result)
        assert result["counts"] == [[1] * EXAMPLES] * EPOCHS, result["counts"]
        one = reference[str(result["global_batch"])]
        np.testing.assert_allclose(result["loss"], one["loss"], rtol=1e-5, atol=1e-6)
        for got, want in zip(result["weights"], one["weights"]):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    return [worker[mode] for worker in two]


def test_per_worker_batch_is_split_over_each_workers_replicas(runs):
    for result in _check(runs, "per_worker_split"):
        assert result["global_batch"] == 4


def test_per_worker_batch_refused_then_its_advice_trains_every_example(runs):
    for result in _check(runs, "per_worker_advice"):
        assert result["advice"] == 2


def test_generator_per_worker_batch_is_split_over_each_workers_replicas(runs):
    for result in _check(runs, "generator_split"):
        assert result["global_batch"] == 4


def test_generator_per_worker_batch_its_replicas_cannot_split_is_refused(runs):
    for worker in runs[1]:
        result = worker["generator_not_split"]
        assert "error" not in result, result.get("trace", result)
        assert "Invalid per-worker batch" in result["refused"], result["refused"]
        assert "multiple of 2" in result["refused"], result["refused"]


def test_auto_sharded_batch_refused_then_its_advice_trains_every_example(runs):
    for result in _check(runs, "auto_sharded_advice"):
        assert result["advice"] == 4


def test_distribute_datasets_from_function_trains_as_one_process(runs):
    _check(runs, "from_function")
