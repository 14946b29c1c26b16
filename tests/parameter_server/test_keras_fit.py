"""Plain Keras `model.fit/evaluate/predict` under `tfdist-opt launch --workers 2 --ps 2`.

One real cluster (chief + 2 workers + 2 ps, _keras_fit_script.py) for the
whole module; each test reads its JSON result.
"""

import json
import os
import subprocess
import sys

import pytest

from tests.multiworker import harness

# `grappler`: its processes run TensorFlow's graph optimizer, as users run (conftest.py).
pytestmark = [pytest.mark.multiworker, pytest.mark.slow, pytest.mark.grappler, pytest.mark.compat]

HERE = os.path.dirname(os.path.abspath(__file__))
TOL = 2e-5  # float32 rounding of 10 SGD steps of size ~1e-2


@pytest.fixture(scope="module")
def result():
    env = harness.worker_env(0, [1], {"TF_CONFIG": ""})
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tfdist_opt",
            "launch",
            "--workers",
            "2",
            "--ps",
            "2",
            "--",
            *harness.python(),
            os.path.join(HERE, "_keras_fit_script.py"),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        cwd=harness.REPO_ROOT,
    )
    try:
        out, err = proc.communicate(timeout=170)
    finally:
        harness._kill(proc)  # pylint: disable=protected-access
    assert proc.returncode == 0, err[-4000:]
    lines = [l for l in out.splitlines() if "RESULT " in l]
    assert len(lines) == 1 and "[chief 0] RESULT " in lines[0], out[-3000:]
    return json.loads(lines[0].split("RESULT ", 1)[1])


def _assert_exact(run):
    assert run["steps"] == run["expected_steps"]
    assert sum(run["steps_completed"]) == run["expected_steps"]
    assert run["scale"] > 0.01  # the updates are large against the tolerance
    assert run["err"] < TOL, run


def test_model_fit_runs_the_coordinator_loop(result):
    assert result["strategy"] == "KerasParameterServerStrategy"
    assert result["model_class"] == "Sequential"  # the swap keeps the name


def test_arrays_validation_split_and_class_weight_exact_under_two_workers(result):
    run = result["arrays"]
    _assert_exact(run)  # class weights applied on the workers, held-out rows unused
    history = run["history"]
    assert set(history) == {"loss", "mae", "val_loss", "val_mae", "examples_per_sec"}
    assert history["val_loss"][-1] == pytest.approx(run["val_loss_numpy"], abs=1e-5)


@pytest.mark.parametrize("kind", ["dataset", "dataset_fn", "build_dataset"])
def test_dataset_inputs_exact_under_two_workers(result, kind):
    _assert_exact(result[kind])


def test_uneven_worker_inputs_never_hang(result):
    # Issue 33, item 4: PS workers do not step together; each repeats its own
    # input (7 batches here) while the chief's copy (10) sets the epoch.
    assert result["uneven_lengths"] == [10, 7]
    _assert_exact(result["uneven_dataset_fn"])


def test_callbacks_get_the_calls_of_ps_fit(result):
    calls = result["fit_calls"]
    assert calls == result["ps_fit_calls"]
    assert calls[0] == "on_train_begin" and calls[-1] == "on_train_end"
    assert calls.count("on_epoch_end") == 2 and calls.count("on_train_batch_end") == 10
    assert calls.count("on_test_begin") == 2  # validation, as Keras's fit
    assert result["evaluate_calls"][0] == "on_test_begin"
    assert result["evaluate_calls"].count("on_test_batch_end") == 7  # 64 rows / 10


def test_evaluate_and_predict_equal_ps_forms_and_numpy(result):
    assert result["evaluate"] == result["ps_evaluate"]
    assert result["evaluate"]["loss"] == pytest.approx(result["evaluate_numpy"], abs=1e-5)
    assert result["predict_err"] < 1e-5
    assert result["predict_equal_ps"]


def test_unsupported_arguments_refused_by_name_before_any_step(result):
    refused = result["refused"]
    assert refused["batch_size"].startswith("ValueError: Invalid value for `batch_size`")
    assert refused["validation_split"].startswith(
        "ValueError: Invalid value for `validation_split`"
    )
    assert refused["class_weight"].startswith("ValueError: Invalid value for `class_weight`")
    assert refused["evaluate_kwargs"].startswith("TypeError: Invalid keyword argument")
    assert "bogus" in refused["evaluate_kwargs"]
    assert result["refused_steps"] == 0


def test_keras_checkpoint_and_backup_with_sharded_variables(result):
    assert result["sharded"] == [[500, 4], [500, 4]]
    assert "best.keras" in result["checkpoint_files"]
    assert result["loaded_equal"]
    assert result["restored_equal"]  # the sharded table, before step 1
    # Restored at epoch 2 of 3: one epoch (64 rows / 16) runs, from the saved step.
    assert result["resume"] == {"epochs_run": 1, "steps": 4}


def test_variables_and_slots_on_ps(result):
    # 2 table shards, kernel, bias, iterations, lr, Adam m and v per shard/variable.
    assert result["placement_count"] == 2 + 2 + 2 + 2 * 4
    assert result["off_ps"] == {}
