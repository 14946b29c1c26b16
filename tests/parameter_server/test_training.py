"""Coordinator training of Keras 3 models on an in-process PS cluster (2 workers, 2 ps).

Both scenarios run once, one after the other on one cluster, in one
subprocess (_train_script.py); the tests read their JSON results.
"""

import json
import os
import subprocess
import warnings

import numpy as np
import pytest

from tests.multiworker import harness

pytestmark = [pytest.mark.multiworker, pytest.mark.slow]


def _run(*scenarios: str) -> dict:
    env = dict(
        os.environ,
        TF_CPP_MIN_LOG_LEVEL="2",
        PYTHONPATH=harness.REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    env.pop("TF_CONFIG", None)
    proc = subprocess.Popen(
        [
            *harness.python(),
            os.path.join(os.path.dirname(__file__), "_train_script.py"),
            *scenarios,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        cwd=harness.REPO_ROOT,
    )
    try:
        out, _ = proc.communicate(timeout=240)
    finally:
        harness._kill(proc)  # pylint: disable=protected-access
    results = {}
    for line in out.splitlines():
        if line.startswith("RESULT "):
            scenario, payload = line[len("RESULT ") :].split(" ", 1)
            results[scenario] = json.loads(payload)
    assert sorted(results) == sorted(scenarios), out[-3000:]
    return results


# gRPC's server-side message when it cannot read a request's bytes into the
# protocol buffer (grpcpp/server_interface.h: no payload, or parsing failed),
# before TensorFlow's handler runs. Seen once in a full suite run: the
# chief's first `RunComponentFunction` to worker 1 at the first `schedule`
# of `ps.fit` ("linear"); "sharded" then trained on the same servers and
# ports in the same process (so no other process held that port), the
# module passed at once on a rerun, and no code of ours builds or parses
# that request.
_TRANSPORT_FLAKE = "Unable to parse request"


@pytest.fixture(scope="module")
def results():
    """Both scenarios in one subprocess, on one cluster (one TF start-up).

    A scenario that failed with `_TRANSPORT_FLAKE` (gRPC could not read a
    request, below TensorFlow) runs again once, on a fresh cluster in a fresh
    process, with a warning saying why; any other error, or the same one
    twice, fails its tests.
    """
    results = _run("linear", "sharded")
    flaky = sorted(name for name, r in results.items() if _TRANSPORT_FLAKE in r.get("error", ""))
    if flaky:
        first = results[flaky[0]]["error"].strip().splitlines()
        warnings.warn(
            f"{flaky} failed in gRPC ({_TRANSPORT_FLAKE!r}; "
            f"{first[-1][:300]}); rerun once on a fresh cluster"
        )
        results.update(_run(*flaky))
    return results


@pytest.fixture(scope="module")
def linear(results):
    assert "error" not in results["linear"], results["linear"]["error"]
    return results["linear"]


@pytest.fixture(scope="module")
def sharded(results):
    assert "error" not in results["sharded"], results["sharded"]["error"]
    return results["sharded"]


def test_keras_fit_raises_one_message_naming_ours(linear):
    assert linear["keras_fit"].startswith("KerasParameterServerError: Keras 3 `model.fit`")
    assert "tfdist_opt.parameter_server.fit" in linear["keras_fit"]
    assert "create_per_worker_dataset" not in linear["keras_fit"]


def test_iterations_equal_steps_under_two_async_workers(linear):
    assert linear["iterations"] == linear["expected_iterations"] == 256


def test_loss_falls_by_90_percent(linear):
    loss = linear["history"]["loss"]
    assert loss[-1] <= 0.1 * loss[0]
    assert set(linear["history"]) == {"loss", "mae", "val_loss", "val_mae", "examples_per_sec"}


def test_variables_and_slots_on_ps(linear):
    assert linear["num_placed"] == 8  # kernel, bias, iterations, lr, 2 x (m, v)
    assert linear["off_ps"] == {}


def test_evaluate_and_predict_match_numpy(linear):
    assert linear["predict_err"] < 1e-5
    assert linear["evaluate"]["loss"] == pytest.approx(
        linear["eval_loss_numpy"], rel=1e-3, abs=1e-9
    )


def test_keras_callbacks(linear):
    assert linear["early_stop_epochs"] == 2
    assert linear["checkpoint_written"]
    # The file holds the weights at the end of its fit (loaded into a plain
    # model), not those before it (that fit's targets are shifted by 1).
    ckpt = linear["checkpoint"]
    for loaded, after in zip(ckpt["loaded"], ckpt["after"]):
        np.testing.assert_allclose(loaded, after, rtol=1e-6, atol=0)
    assert abs(ckpt["after"][1][0] - ckpt["before"][1][0]) > 0.1  # the bias moved


def test_throughput_monitor_sees_completed_steps(linear):
    m = linear["monitor"]
    assert m["steps_timed"] == 2 * 64 - 4
    # Batch hooks run at completion, so the monitor's rate matches the epoch
    # rate (hooks at scheduling time would report many times more).
    assert m["examples_per_sec"] < 3 * max(linear["epoch_examples_per_sec"])


def test_backup_and_restore_resumes_after_last_saved_epoch(linear):
    assert linear["resumed_from_epoch"] == 1
    assert linear["resumed_epochs_run"] == 1
    before, after = linear["resume_iterations"]
    assert after - before == 8  # one epoch of 512/64 steps, not three


def test_sharded_embedding_trains_sparsely_on_both_shards(sharded):
    assert sharded["sharded"]
    assert sharded["shard_shapes"] == [[500000, 4], [500000, 4]]
    assert all(n > 0 for n in sharded["changed_per_shard"])
    assert sharded["changed_outside_batch"] == 0
    assert sharded["loss"][-1] < sharded["loss"][0]
    assert sharded["iterations"] == 2 * 16


def test_sharded_slots_colocated_with_their_shards(sharded):
    placed = sharded["placement"]
    slots = {k: v for k, v in placed.items() if "momentum" in k or "velocity" in k}
    assert len(slots) == 4
    for name, device in slots.items():
        shard = 0 if "_part_0_" in name else 1
        assert device.startswith(f"/job:ps/replica:0/task:{shard}/"), (name, device)
    assert sharded["off_ps"] == {}


def test_sharded_checkpoint_round_trips(sharded):
    assert sharded["restored_equal"]
    saved, restored = sharded["restored_iterations"]
    assert saved == restored
