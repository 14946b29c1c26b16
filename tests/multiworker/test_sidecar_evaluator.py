"""`tfdist-opt launch --evaluator`: one script trains and evaluates side-car.

Real processes on 127.0.0.1 (tests/multiworker/scripts/sidecar_train.py):
the training tasks `fit` with a ModelCheckpoint per epoch while the
`evaluator` task runs `tfdist_opt.SidecarEvaluator` on the same directory.
The evaluator evaluates every checkpoint in order, writes TensorBoard
scalars, exits 0 once the chief has exited, and its metrics for the last
checkpoint equal `model.evaluate` of the final weights, and those for the
first checkpoint the same metrics of the weights after epoch 1.
"""

import json

import pytest

from tests.multiworker import harness

pytestmark = [pytest.mark.multiworker, pytest.mark.slow]

SCRIPT = f"{harness.REPO_ROOT}/tests/multiworker/scripts/sidecar_train.py"


def _run(tmp_path, n, options, epochs):
    proc = harness.start_launch(
        n, ["--evaluator", *options], [SCRIPT, "--out", str(tmp_path), "--epochs", str(epochs)]
    )
    out, err = harness.finish_launch(proc, timeout=170)
    assert proc.returncode == 0, f"{out[-2000:]}\n{err[-4000:]}"
    assert "[evaluator 0] tfdist_opt: evaluator: stopping (training ended)" in err
    result = json.loads((tmp_path / "evaluator.json").read_text())
    final = json.loads((tmp_path / "final.json").read_text())
    steps = list(range(1, epochs + 1))
    assert [e["step"] for e in result["evaluations"]] == steps
    assert result["scalars"] == sorted(
        [f"evaluation/{m}", s] for m in ("accuracy", "loss") for s in steps
    )
    last = result["evaluations"][-1]
    assert last["name"] == f"weights.{epochs:02d}.weights.h5"
    assert last["metrics"]["accuracy"] == final["accuracy"]
    assert last["metrics"]["loss"] == pytest.approx(final["loss"], rel=1e-6)
    # The first evaluation is of the first checkpoint's model (epoch 1).
    first, epoch1 = result["evaluations"][0], json.loads((tmp_path / "epoch1.json").read_text())
    assert first["name"] == "weights.01.weights.h5"
    assert first["metrics"]["accuracy"] == pytest.approx(epoch1["accuracy"], abs=1e-6)
    assert first["metrics"]["loss"] == pytest.approx(epoch1["loss"], rel=1e-5)
    assert epoch1["loss"] != pytest.approx(final["loss"], rel=1e-3)
    return result


def test_two_workers_and_an_evaluator(tmp_path):
    _run(tmp_path, 2, [], epochs=3)


def test_parameter_servers_and_an_evaluator(tmp_path):
    _run(tmp_path, 2, ["--ps", "1"], epochs=2)
