"""The start-up agreement on the restored step, with an in-memory key-value store."""

import threading

import pytest

from tests.kv_fake import ThreadStore
from tfdist_opt.callbacks import restore_agreement as ra


def _run_all(mines, timeout_s=5.0):
    store, tasks, out = ThreadStore(), sorted(mines), {}
    threads = [
        threading.Thread(
            target=lambda t=t: out.__setitem__(
                t, ra.decide(ra.exchange(t, tasks, store, "ns/1", mines[t], timeout_s), timeout_s)
            )
        )
        for t in tasks
    ]
    for th in threads:
        th.start()
    for th in threads:
        th.join(10)
    return out


def test_same_step_everywhere_starts():
    e = ra.entry(8, "backup-8", "/shared/b")
    assert _run_all({"worker_0": e, "worker_1": e}) == {"worker_0": None, "worker_1": None}


def test_different_steps_stop_every_worker_with_one_line_naming_each():
    out = _run_all(
        {"worker_0": ra.entry(4, "backup-4", "/host0/b"), "worker_1": ra.entry(0, None, "/host1/b")}
    )
    assert out["worker_0"] == out["worker_1"]  # the same decision on both
    line = out["worker_0"]
    assert "\n" not in line and "workers restored different states" in line
    assert "worker_0 at step 4 (backup-4 in /host0/b)" in line
    assert "worker_1 at step 0 (no backup in /host1/b)" in line


def test_one_workers_problem_stops_all_naming_it():
    out = _run_all(
        {
            "worker_0": ra.entry(0, None, "/b", "backup_dir '/b' is not writable"),
            "worker_1": ra.entry(0, None, "/b"),
        }
    )
    assert out["worker_0"] == out["worker_1"]
    assert "a worker cannot start" in out["worker_1"]
    assert (
        "worker_0 at step 0 (no backup in /b) [backup_dir '/b' is not writable]" in out["worker_1"]
    )


def test_missing_peer_is_named():
    store = ThreadStore()
    got = ra.exchange(
        "worker_0", ["worker_0", "worker_1"], store, "ns/2", ra.entry(0, None, "/b"), timeout_s=0.2
    )
    assert "worker_1: did not reach on_train_begin within 0.2 s" in ra.decide(got, 0.2)


def test_no_coordination_service_warns_and_continues(monkeypatch):
    class NoService:
        def set(self, key, value):
            raise RuntimeError("coordination service is not enabled")

        get = set

    monkeypatch.setenv(
        "TF_CONFIG",
        '{"cluster": {"worker": ["localhost:1", '
        '"localhost:2"]}, "task": {"type": "worker", "index": 0}}',
    )
    ra.agree_or_raise({"step": 4, "name": "backup-4"}, None, "/b", store=NoService())
    with pytest.raises(OSError, match="not writable"):  # its own problem still stops it
        ra.agree_or_raise(None, OSError("backup_dir '/b' is not writable"), "/b", store=NoService())
