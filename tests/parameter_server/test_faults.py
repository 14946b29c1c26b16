"""PS fault tolerance with real processes: chief + 2 workers + 2 ps on 127.0.0.1.

A worker SIGKILLed mid-training: the coordinator reschedules its steps, the
epoch still runs every step, and the worker started again takes steps. A ps
task SIGKILLed: the chief stops with one line naming it; the job started
again resumes from the last checkpoint.
"""

import json
import os
import signal
import subprocess
import time

import pytest

from tests.multiworker import harness

pytestmark = [pytest.mark.multiworker, pytest.mark.slow]

SCRIPT = os.path.join(os.path.dirname(__file__), "_cluster_script.py")


class Cluster:
    def __init__(self, tmp_path, env_extra):
        ports = harness.free_ports(5)
        self.cluster = {
            "chief": [f"127.0.0.1:{ports[0]}"],
            "worker": [f"127.0.0.1:{p}" for p in ports[1:3]],
            "ps": [f"127.0.0.1:{p}" for p in ports[3:]],
        }
        self.env_extra = env_extra
        self.tmp_path = tmp_path
        self.procs = {}

    def start(self, role, index, cwd=None):
        if cwd is None:  # tasks write relative trace files here, not in the repo
            cwd = self.tmp_path / "cwd"
            (cwd / "trace").mkdir(parents=True, exist_ok=True)
        env = harness.worker_env(
            0,
            [1],
            dict(
                self.env_extra,
                TF_CONFIG=json.dumps(
                    {"cluster": self.cluster, "task": {"type": role, "index": index}}
                ),
            ),
        )
        log = open(self.tmp_path / f"{role}{index}-{time.monotonic_ns()}.log", "w+")
        p = subprocess.Popen(
            [*harness.python(), SCRIPT],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=cwd,
        )
        self.procs[(role, index)] = (p, log)
        return p

    def start_all(self):
        for role, tasks in self.cluster.items():
            for i in range(len(tasks)):
                self.start(role, i)

    def kill(self, role, index):
        p, _ = self.procs[(role, index)]
        os.killpg(p.pid, signal.SIGKILL)
        p.wait(timeout=10)

    def wait(self, role, index, timeout):
        p, log = self.procs[(role, index)]
        p.wait(timeout=timeout)
        log.seek(0)
        return p.returncode, log.read()

    def close(self):
        for p, log in self.procs.values():
            harness._kill(p)  # pylint: disable=protected-access
            log.close()


def _wait_for(path, cluster, timeout=120):
    deadline = time.monotonic() + timeout
    chief = cluster.procs[("chief", 0)][0]
    while not os.path.exists(path):
        assert time.monotonic() < deadline, f"{path} never appeared"
        assert chief.poll() is None, cluster.wait("chief", 0, 1)[1][-3000:]
        time.sleep(0.2)


def _result(output):
    lines = [l for l in output.splitlines() if l.startswith("RESULT ")]
    assert lines, output[-3000:]
    return json.loads(lines[-1][len("RESULT ") :])


def test_worker_killed_mid_training_is_survived_and_rejoins(tmp_path):
    rejoined = tmp_path / "rejoined"  # the restarted worker's cwd
    (rejoined / "trace").mkdir(parents=True)
    mark, stop = str(tmp_path / "mark"), tmp_path / "stop"
    c = Cluster(
        tmp_path,
        {
            "PS_EPOCHS": "100000",
            "PS_STEPS": "10",
            "PS_MARK": mark,
            "PS_TRACE_DIR": "trace",
            "PS_STOP": str(stop),
        },
    )
    try:
        c.start_all()
        _wait_for(mark + ".0", c)
        c.kill("worker", 1)
        c.start("worker", 1, cwd=str(rejoined))
        # Training goes on with one worker until the restarted one makes
        # batches (the coordinator re-creates its dataset when it is back).
        batches = rejoined / "trace" / "batches"
        deadline = time.monotonic() + 120
        while not batches.exists():
            assert time.monotonic() < deadline, "the restarted worker never made a batch"
            assert c.procs[("chief", 0)][0].poll() is None
            time.sleep(0.2)
        stop.touch()
        code, out = c.wait("chief", 0, timeout=120)
        assert code == 0, out[-3000:]
        result = _result(out)
        epochs = result["epochs_run"]
        assert 2 <= epochs < 100000
        assert "Worker /job:worker/replica:0/task:1 has been recovered" in out
        assert result["steps_completed"] == [10] * epochs  # each step's result once
        # The step in flight on the killed worker may have applied its update
        # before dying and is then run again (TF: at-least-once): <= 1 extra.
        assert 10 * epochs <= result["iterations"] <= 10 * epochs + 1
        for key in (("worker", 0), ("worker", 1), ("ps", 0), ("ps", 1)):
            assert c.wait(*key, timeout=60)[0] == 0, key
    finally:
        c.close()


def test_lost_ps_stops_chief_with_one_line_and_restart_resumes(tmp_path):
    mark = str(tmp_path / "mark")
    stop = tmp_path / "stop"
    extra = {
        "PS_EPOCHS": "100000",
        "PS_STEPS": "20",
        "PS_MARK": mark,
        "PS_BACKUP": str(tmp_path / "backup"),
        "PS_STOP": str(stop),
    }
    c = Cluster(tmp_path, extra)
    try:
        c.start_all()
        _wait_for(mark + ".0", c)
        c.kill("ps", 1)
        start = time.monotonic()
        code, out = c.wait("chief", 0, timeout=120)
        detect_s = time.monotonic() - start
        assert code == 1, out[-3000:]
        lines = [l for l in out.splitlines() if "training stopped" in l]
        assert len(lines) == 1, out[-3000:]
        assert lines[0].startswith(
            f"tfdist_opt: training stopped: parameter server ps:1 ({c.cluster['ps'][1]}) was lost"
        ), lines[0]
        assert "Traceback" not in out
        print(f"ps loss detected in {detect_s:.1f} s")
    finally:
        c.close()
    c2 = Cluster(tmp_path, dict(extra, PS_MARK=""))
    c2.cluster = c.cluster
    stop.touch()  # the restarted job trains one epoch, then stops
    try:
        c2.start_all()
        code, out = c2.wait("chief", 0, timeout=150)
        assert code == 0, out[-3000:]
        result = _result(out)
        restored = result["restored_epoch"]
        assert restored >= 0
        assert result["epochs_run"] == 1 and result["steps_completed"] == [20]
        # The checkpoint of the last saved epoch holds its step count exactly.
        assert result["iterations"] == 20 * (restored + 1) + 20
    finally:
        c2.close()
