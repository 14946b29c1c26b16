"""A second opt_strategy() in a multi-worker process (issue 17).

The first call starts this task's TF server; a second call with the same
TF_CONFIG must reuse it (not fail the port pre-flight on our own port) and
all-reduce correctly. A different TF_CONFIG is refused in-process.
"""

import json

import numpy as np
import pytest

from tests.multiworker import harness
from tfdist_opt.strategy.kinds import _server

SCRIPT = "tests/multiworker/scripts/twice_train.py"


def _expected_weights():
    from tests.multiworker.scripts import twice_train as t

    w, b = np.zeros((2, 1)), 0.0
    for _ in range(t.EPOCHS):  # full batch of 8 over both workers
        err = t.X @ w + b - t.Y
        w = w - t.LR * 2 * t.X.T @ err / len(t.X)
        b = b - t.LR * 2 * float(err.mean())
    return np.concatenate([w.ravel(), [b]])


@pytest.mark.multiworker
def test_second_strategy_same_tf_config_trains_correctly():
    _check_trained(harness.run_workers(2, [SCRIPT], timeout_s=120))


@pytest.mark.multiworker
def test_second_strategy_waits_for_a_late_peer():
    # Task 0 builds its second strategy 5 s after task 1, which meanwhile
    # reaches its first collective. Without the rendezvous both tasks hung
    # in that collective (task 1's group request reached task 0's replaced
    # collective executor): 2 runs in 2 timed out.
    _check_trained(
        harness.run_workers(2, [SCRIPT], timeout_s=60, extra_env={"TWICE_TRAIN_LAG_S": "5"})
    )


def _check_trained(results):
    for r in results:
        assert r.returncode == 0, r.output[-3000:]
        line = [l for l in r.output.splitlines() if l.startswith("RESULT ")][-1]
        got = json.loads(line[len("RESULT ") :])
        assert got["replicas"] == 2 and got["first"] == 2
        assert got["sum"] == 3.0
        np.testing.assert_allclose(got["w"], _expected_weights(), rtol=1e-5, atol=1e-6)


def _cfg(index, ports=(1111, 2222)):
    return {
        "cluster": {"worker": [f"localhost:{p}" for p in ports]},
        "task": {"type": "worker", "index": index},
    }


def test_other_tf_config_in_same_process_is_refused():
    _server._reset_for_tests()
    try:
        assert not _server.already_running(_cfg(0))
        _server.mark_started(_cfg(0))
        assert _server.already_running(_cfg(0))
        with pytest.raises(RuntimeError, match="cannot stop or restart"):
            _server.already_running(_cfg(1))
        with pytest.raises(RuntimeError, match="TF_CONFIG"):
            _server.already_running(_cfg(0, ports=(1111, 3333)))
    finally:
        _server._reset_for_tests()


def test_rendezvous_ids_count_the_reuses_and_a_timeout_is_named(monkeypatch):
    from tfdist_opt.coordination import kv_store
    from tfdist_opt.strategy.kinds import multi_worker

    _server._reset_for_tests()
    try:
        assert [_server.rendezvous_id() for _ in range(2)] == [
            "tfdist_opt/strategy_reuse/1",
            "tfdist_opt/strategy_reuse/2",
        ]
    finally:
        _server._reset_for_tests()
    waited = []

    class Store:
        def barrier(self, barrier_id, timeout_s):
            waited.append((barrier_id, timeout_s))
            return False

    monkeypatch.setattr(kv_store, "TFKeyValueStore", Store)
    with pytest.raises(
        RuntimeError,
        match=r"waited 7 s \(startup_timeout_s\) at barrier "
        r"'tfdist_opt/strategy_reuse/3'.*same number",
    ):
        multi_worker._rendezvous("tfdist_opt/strategy_reuse/3", 7.0)
    assert waited == [("tfdist_opt/strategy_reuse/3", 7.0)]
