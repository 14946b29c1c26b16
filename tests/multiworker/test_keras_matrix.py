"""The Keras option matrix: each common option x {one device, Mirrored, 2 workers}.

`tests/multiworker/scripts/keras_matrix.py` runs every cell (one option, or
a pair, on a small classifier: 64 examples, global batch 16, SGD, 2 epochs,
no shuffling) under one strategy per process: one local process runs plain
Keras on one device with no strategy (the reference) and `opt_strategy()`'s
Mirrored on 2 virtual CPUs; one 2-worker cluster (started once for the
module) runs the same list. Both run at the same time. Every cell of every
strategy must match the reference's weights, fit history, evaluate and
predict results within its tolerance, or raise `UnsupportedCombinationError`
for the reasons listed in `UNSUPPORTED` (none today). `opt_strategy()` on
one device gave bit-identical results in every cell when measured (not
rerun here, for time; tests/strategy/test_keras_steps.py covers its one
difference, generator input).

Tolerances (max |a - b| <= tol + tol |b|):
- float32 cells: 1e-5. The all-reduce sums in another order and XLA fuses
  and reorders operations; measured <= 1.4e-7 (relative to 1 + |b|).
- mixed_float16: 5e-3. Per-replica batches of 8 instead of 16 round their
  float16 sums differently (float16 eps ~1e-3, 8 SGD steps); measured 6.3e-4.
- mixed_bfloat16: 2e-2. bfloat16 eps ~8e-3, the same reason; measured
  1.2e-2. (At 5e-2, multiplying every gradient by 1.1 passed.)

Not in the matrix: Dropout (every replica draws its own mask, by design of
TF's per-replica seeds, so no strategy repeats one device's masks) and
metric objects created outside the scope (their variables are then not
distributed: each worker logs its own half; Keras's documented rule is to
create them in the scope).
"""

import json
import threading

import numpy as np
import pytest

from tests.multiworker import harness

pytestmark = [pytest.mark.multiworker, pytest.mark.slow, pytest.mark.compat]

SCRIPT = "tests/multiworker/scripts/keras_matrix.py"
KINDS = ("mirrored", "worker0", "worker1")
CELLS = (
    "baseline",
    "metrics",
    "validation_data",
    "validation_split",
    "sample_weight",
    "class_weight",
    "sync_batchnorm",
    "callbacks",
    "generator",
    "py_dataset",
    "run_eagerly",
    "mixed_float16",
    "mixed_bfloat16",
    "jit_compile",
    "jit_compile_sync_batchnorm",
    "steps_per_execution",
    "steps_per_execution_jit",
    "dict_inputs",
    "dict_outputs",
    "dict_outputs_bfloat16",
    "tuple_outputs",
)
TOLERANCE = {"mixed_float16": 5e-3, "mixed_bfloat16": 2e-2, "dict_outputs_bfloat16": 2e-2}
DEFAULT_TOLERANCE = 1e-5
# cell -> {kind: why}: combinations that must raise UnsupportedCombinationError.
UNSUPPORTED: dict[str, dict[str, str]] = {}


@pytest.fixture(scope="module")
def matrix(tmp_path_factory):
    out = tmp_path_factory.mktemp("matrix")
    local = {}

    def run_local():
        local["result"] = harness.run_single(
            [SCRIPT, "--out", str(out / "local.json"), "--strategies", "none,mirrored"],
            timeout_s=400,
        )

    thread = threading.Thread(target=run_local)
    thread.start()
    workers = harness.run_workers(
        2, [SCRIPT, "--out", str(out / "mw"), "--strategies", "multi_worker"], timeout_s=400
    )
    thread.join()
    assert local["result"].returncode == 0, local["result"].output[-3000:]
    for r in workers:
        assert r.returncode == 0, f"worker {r.index}:\n{r.output[-3000:]}"
    return _load(out)


def _load(out):
    cells = json.loads((out / "local.json").read_text())
    for i in (0, 1):
        worker = json.loads((out / f"mw.worker{i}.json").read_text())
        cells[f"worker{i}"] = worker["multi_worker"]
        cells[f"iterators{i}"] = worker["iterators"]
    return cells


def _flat(value, path=""):
    """{path: float array} of a nested dict/list of numbers (keys kept)."""
    if isinstance(value, dict):
        out = {}
        for k in sorted(value):
            out.update(_flat(value[k], f"{path}/{k}"))
        return out
    if isinstance(value, list) and value and isinstance(value[0], (dict, list)):
        out = {}  # weights, or a list of outputs: entry by entry
        for i, v in enumerate(value):
            out.update(_flat(v, f"{path}[{i}]"))
        return out
    return {path: np.asarray(value, dtype="float64")}


def _assert_close(got, want, tol, what):
    got, want = _flat(got), _flat(want)
    assert got.keys() == want.keys(), what
    for key in want:
        assert got[key].shape == want[key].shape, f"{what}{key}"
        np.testing.assert_allclose(got[key], want[key], rtol=tol, atol=tol, err_msg=f"{what}{key}")


def test_every_cell_ran_everywhere(matrix):
    for kind in ("none", *KINDS):
        assert set(matrix[kind]) == set(CELLS), kind


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("cell", CELLS)
def test_cell_matches_one_device(matrix, cell, kind):
    want, got = matrix["none"][cell], matrix[kind][cell]
    assert want["status"] == "ok", want
    why = UNSUPPORTED.get(cell, {}).get(kind)
    if why is not None:
        assert got["type"] == "UnsupportedCombinationError", got
        assert why in got["message"]
        return
    assert got["status"] == "ok", f"{got['type']}: {got['message']}\n{got['traceback']}"
    for stage in ("weights", "history", "evaluate", "predict", "predict_type"):
        assert (stage in got) == (stage in want), stage
        if stage not in want:
            continue
        if stage == "predict_type":
            assert got[stage] == want[stage]
        else:
            _assert_close(
                got[stage],
                want[stage],
                TOLERANCE.get(cell, DEFAULT_TOLERANCE),
                f"{cell}/{kind}/{stage}",
            )


@pytest.mark.parametrize("kind", ("none", *KINDS))
@pytest.mark.parametrize("cell", ("jit_compile", "steps_per_execution", "steps_per_execution_jit"))
def test_option_keeps_the_weights_of_the_baseline(matrix, cell, kind):
    """jit_compile=True equals False, steps_per_execution=4 equals 1."""
    _assert_close(
        matrix[kind][cell]["weights"],
        matrix[kind]["baseline"]["weights"],
        DEFAULT_TOLERANCE,
        f"{cell}/{kind} vs baseline",
    )


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("cell", ("jit_compile", "steps_per_execution_jit"))
def test_jit_cells_compile_each_replica_step_with_xla(matrix, cell, kind):
    """Equal weights alone would pass with XLA never used."""
    marks = matrix[kind][cell]["xla_steps"]
    assert marks and all(marks), marks  # one per replica and stage traced
    assert not matrix["none"][cell]["xla_steps"]  # plain Keras compiles itself


@pytest.mark.parametrize("worker", (0, 1))
def test_each_worker_reads_a_plain_tf_data_iterator(matrix, worker):
    """One CPU replica per worker: `plain_iterator`, not TF's MultiDeviceIterator."""
    assert matrix[f"iterators{worker}"] == {
        "experimental_distribute_dataset": ["OwnedIterator"],
        "distribute_datasets_from_function": ["OwnedIterator"],
    }


@pytest.mark.parametrize("kind", ("mirrored", "worker0", "worker1"))
def test_uncompilable_layer_falls_back_with_one_named_warning(matrix, kind):
    warnings = matrix[kind]["jit_compile_sync_batchnorm"]["warnings"]
    assert len(warnings) == 1, warnings
    assert "layer 'sync_bn'" in warnings[0] and "train step" in warnings[0]
    for cell in CELLS:
        if cell != "jit_compile_sync_batchnorm":
            assert not matrix[kind][cell]["warnings"], (cell, matrix[kind][cell]["warnings"])
