"""The local launcher with tiny Python children (no TensorFlow): seconds.

Children are `python -c` programs that print, fail, hang, listen or record
signals; each test bounds its own time and checks that no process is left.
"""

import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from tfdist_opt import cli
from tfdist_opt.cluster import sources
from tfdist_opt.launch import local as launcher
from tfdist_opt.cluster import tf_config as tc
from tfdist_opt.evaluation.loop import TRAINING_ENDED_ENV
from tests.multiworker import harness

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _py(code):
    return [sys.executable, "-c", textwrap.dedent(code)]


def _run(code, n, **kwargs):
    out, err = io.StringIO(), io.StringIO()
    kwargs.setdefault("startup_timeout", None)
    kwargs.setdefault("term_timeout", 5)
    t0 = time.monotonic()
    result = launcher.run_local(
        _py(code), n, stdout=out, stderr=err, handle_signals=False, **kwargs
    )
    return result, out.getvalue(), err.getvalue(), time.monotonic() - t0


_gone = harness.wait_gone  # absent, or a zombie awaiting init


def _wait_for(path, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path) and os.path.getsize(path) > 0:
            return
        time.sleep(0.05)
    raise AssertionError(f"{path} did not appear within {timeout} s")


def test_an_evaluator_slower_than_training_is_told_that_training_ended(tmp_path):
    # The training tasks exit before the evaluator looks for the chief: the
    # launcher creates the file named in its TRAINING_ENDED_ENV once they
    # all exited 0 (and only then), so the evaluator stops at once.
    result, _, err, _ = _run(
        f"""
        import json, os, sys, time
        task = json.loads(os.environ["TF_CONFIG"])["task"]
        if task["type"] != "evaluator":
            sys.exit(0)
        path = os.environ["{TRAINING_ENDED_ENV}"]
        deadline = time.monotonic() + 20
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.05)
        print("evaluator saw the cue", os.path.exists(path), file=sys.stderr)
        """,
        2,
        evaluator=True,
    )
    assert result.returncode == 0, err
    assert "[evaluator 0] evaluator saw the cue True" in err, err


def _kill_all(pids):
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


# ------------------------------------------------------------ happy path
def test_two_workers_get_their_tf_config_and_prefixed_output():
    result, out, err, _ = _run(
        """
        import json, os, sys
        cfg = json.loads(os.environ["TF_CONFIG"])
        print("index", cfg["task"]["index"], "of", len(cfg["cluster"]["worker"]),
              os.environ["TFDIST_LAUNCH_WORKER_INDEX"],
              os.environ["TFDIST_LAUNCH_RESTART_COUNT"])
        print("to stderr", file=sys.stderr)
        sys.stdout.write("no newline")
    """,
        2,
    )
    assert result.returncode == 0, err
    assert "[worker 0] index 0 of 2 0 0\n" in out
    assert "[worker 1] index 1 of 2 1 0\n" in out
    assert "[worker 0] no newline\n" in out
    assert "[worker 1] to stderr\n" in err
    assert "[launch] all 2 worker(s) finished" in err


def test_workers_ports_are_loopback_and_distinct():
    result, out, _, _ = _run(
        """
        import os; print(os.environ["TF_CONFIG"])
    """,
        3,
    )
    assert result.returncode == 0
    line = [l for l in out.splitlines() if l.startswith("[worker 2]")][0]
    cfg = tc.parse_tf_config(line.split("] ", 1)[1])
    addrs = cfg["cluster"]["worker"]
    assert len(set(addrs)) == 3 and all(a.startswith("localhost:") for a in addrs)


def test_single_worker_gets_no_tf_config_and_cpu_replicas(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", '{"stale": true}')
    result, out, _, _ = _run(
        """
        import os
        print(os.environ.get("TF_CONFIG"), os.environ["TFDIST_OPT_CPU_REPLICAS"])
    """,
        1,
        cpu_replicas=4,
    )
    assert result.returncode == 0
    assert "[worker 0] None 4\n" in out


def test_cpu_replicas_above_one_needs_one_worker():
    with pytest.raises(
        ValueError,
        match=r"`--cpu-replicas`.*only possible with "
        r"-n 1.*Received: --cpu-replicas=4 with -n 2",
    ):
        launcher.run_local(["true"], 2, cpu_replicas=4)
    launcher.check_cpu_replicas(2, 1)
    launcher.check_cpu_replicas(1, 8)


# ------------------------------------------------------------ failures
def test_first_failure_code_is_returned_and_the_others_are_stopped(tmp_path):
    # Worker 0 hangs (with a grandchild); worker 1 fails with code 3.
    result, _, err, elapsed = _run(
        f"""
        import os, subprocess, sys, time
        i = os.environ["TFDIST_LAUNCH_WORKER_INDEX"]
        if i == "1":
            time.sleep(0.5)
            sys.exit(3)
        child = subprocess.Popen(["sleep", "60"])
        with open(r"{tmp_path}/pids", "w") as f:
            f.write(f"{{os.getpid()}} {{child.pid}}")
        time.sleep(60)
    """,
        2,
    )
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    try:
        assert result.returncode == 3
        assert result.failed_worker == 1
        assert "worker 1 exited with code 3; stopped the other 1 worker(s)" in err
        assert elapsed < 10
        assert all(_gone(p) for p in pids), "a worker or its child survived"
    finally:
        _kill_all(pids)


def test_worker_killed_by_signal_reports_128_plus_signal():
    result, _, err, _ = _run(
        """
        import os, signal
        if os.environ["TFDIST_LAUNCH_WORKER_INDEX"] == "0":
            os.kill(os.getpid(), signal.SIGKILL)
        import time; time.sleep(60)
    """,
        2,
    )
    assert result.returncode == 137
    assert "worker 0 was killed by SIGKILL (exit code 137)" in err


def test_worker_ignoring_sigterm_is_killed_after_term_timeout(tmp_path):
    result, _, _, elapsed = _run(
        f"""
        import os, signal, sys, time
        if os.environ["TFDIST_LAUNCH_WORKER_INDEX"] == "1":
            # fail once worker 0 ignores SIGTERM (not before, under load)
            deadline = time.monotonic() + 60
            while (not os.path.exists(r"{tmp_path}/pid")
                   and time.monotonic() < deadline):
                time.sleep(0.01)
            sys.exit(2)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        open(r"{tmp_path}/pid.tmp", "w").write(str(os.getpid()))
        os.replace(r"{tmp_path}/pid.tmp", r"{tmp_path}/pid")
        time.sleep(60)
    """,
        2,
        term_timeout=1,
    )
    pid = int((tmp_path / "pid").read_text())
    try:
        assert result.returncode == 2
        assert elapsed < 8
        assert _gone(pid)
    finally:
        _kill_all([pid])


def test_max_restarts_restarts_the_whole_group():
    code = """
        import os, sys
        attempt = os.environ["TFDIST_LAUNCH_RESTART_COUNT"]
        i = os.environ["TFDIST_LAUNCH_WORKER_INDEX"]
        print("attempt", attempt, os.environ["TF_CONFIG"][-30:])
        sys.exit(5 if attempt == "0" and i == "1" else 0)
    """
    result, out, err, _ = _run(code, 2, max_restarts=1)
    assert result.returncode == 0 and result.restarts == 1
    assert (
        "worker 1 exited with code 5; stopped the other 1 worker(s); "
        "restarting the group (restart 1 of 1)" in err
    )
    # Each worker ran attempt 0 and, restarted with the group, attempt 1.
    attempts = sorted(re.findall(r"^\[worker (\d+)\] attempt (\d+)", out, re.M))
    assert attempts == [("0", "0"), ("0", "1"), ("1", "0"), ("1", "1")], out
    result, _, _, _ = _run(code, 2, max_restarts=0)
    assert result.returncode == 5 and result.restarts == 0


def test_restarts_are_bounded():
    result, out, err, _ = _run("import sys; sys.exit(4)", 2, max_restarts=2)
    assert result.returncode == 4 and result.restarts == 2
    assert err.count("restarting the group") == 2


# ------------------------------------------------------------ joining
def test_worker_that_never_listens_fails_the_launch_by_name():
    result, _, err, elapsed = _run(
        """
        import os, socket, time, json
        cfg = json.loads(os.environ["TF_CONFIG"])
        i = cfg["task"]["index"]
        if i == 0:  # listens, as TF's server does once the strategy exists
            port = int(cfg["cluster"]["worker"][0].rsplit(":", 1)[1])
            s = socket.socket(); s.bind(("", port)); s.listen()
        time.sleep(60)
    """,
        2,
        startup_timeout=1.5,
    )
    assert result.returncode == launcher.EXIT_LAUNCH_ERROR
    assert result.failed_worker == 1
    assert "worker 1 (localhost:" in err and "did not join within 1.5 s" in err
    assert "worker 0 (" not in err
    assert elapsed < 8


def test_workers_that_listen_or_finish_pass_the_startup_check():
    result, _, err, _ = _run(
        """
        import os, socket, time, json
        cfg = json.loads(os.environ["TF_CONFIG"])
        i = cfg["task"]["index"]
        port = int(cfg["cluster"]["worker"][i].rsplit(":", 1)[1])
        s = socket.socket(); s.bind(("", port)); s.listen()
        time.sleep(2.5)
    """,
        2,
        startup_timeout=1,
    )
    assert result.returncode == 0, err


# ------------------------------------------------------------ pre-flight
def test_port_in_use_is_reported_with_port_and_task():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        t0 = time.monotonic()
        with pytest.raises(
            launcher.PortInUseError, match=f"Port {port} for worker 1 is already in use"
        ):
            launcher.run_local(
                ["true"], 3, base_port=port - 1, handle_signals=False, stderr=io.StringIO()
            )
        assert time.monotonic() - t0 < 3


# ------------------------------------------------------------ signals (CLI)
_SIGNAL_CHILD = """
import os, signal, sys, time
i = os.environ["TFDIST_LAUNCH_WORKER_INDEX"]
out = sys.argv[1]
def on(signum, frame):
    open(os.path.join(out, f"sig-{i}"), "w").write(str(signum))
    sys.exit(0)
signal.signal(signal.SIGTERM, on)
signal.signal(signal.SIGINT, on)
if i in sys.argv[2:]:  # these workers ignore both signals
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
open(os.path.join(out, f"pid-{i}"), "w").write(str(os.getpid()))
time.sleep(60)
"""


def _launch_cli(tmp_path, *options, ignoring=()):
    script = tmp_path / "child.py"
    script.write_text(_SIGNAL_CHILD)
    env = dict(os.environ, PYTHONPATH=REPO_ROOT)
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tfdist_opt",
            "launch",
            "-n",
            "2",
            "--startup-timeout",
            "0",
            *options,
            "--",
            sys.executable,
            str(script),
            str(tmp_path),
            *(str(i) for i in ignoring),
        ],
        env=env,
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_to_launcher_reaches_every_worker(tmp_path, signum):
    # The grace before SIGKILL is long here: under load a worker can need
    # more than the default 5 s to be scheduled and run its handler, and was
    # then SIGKILLed without a trace (a flaky missing sig file). The launcher
    # returns as soon as both workers exit; it says when it had to SIGKILL.
    proc = _launch_cli(tmp_path, "--term-timeout", "120")
    pids = []
    try:
        for i in range(2):
            _wait_for(tmp_path / f"pid-{i}")
        pids = [int((tmp_path / f"pid-{i}").read_text()) for i in range(2)]
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=150)
        assert proc.returncode == 128 + signum, err
        for i in range(2):
            assert (tmp_path / f"sig-{i}").exists(), f"worker {i} never ran its handler:\n{err}"
            assert (tmp_path / f"sig-{i}").read_text() == str(int(signum))
        assert f"got {signal.Signals(signum).name}; stopped 2 worker(s)" in err
        assert "SIGKILLed" not in err
        assert all(_gone(p) for p in pids)
    finally:
        _kill_all(pids)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def test_worker_ignoring_the_forwarded_signal_is_sigkilled_and_named(tmp_path):
    proc = _launch_cli(tmp_path, "--term-timeout", "1", ignoring=[0, 1])
    pids = []
    try:
        for i in range(2):
            _wait_for(tmp_path / f"pid-{i}")
        pids = [int((tmp_path / f"pid-{i}").read_text()) for i in range(2)]
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 128 + signal.SIGINT, err
        assert not (tmp_path / "sig-0").exists() and not (tmp_path / "sig-1").exists()
        assert (
            "got SIGINT; stopped 2 worker(s) (worker 0, worker 1 SIGKILLed: "
            "still running 1 s after SIGINT; --term-timeout sets the grace)"
        ) in err
        assert all(_gone(p) for p in pids)
    finally:
        _kill_all(pids)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def test_sigkilled_launcher_leaves_no_worker(tmp_path):
    proc = _launch_cli(tmp_path)
    pids = []
    try:
        for i in range(2):
            _wait_for(tmp_path / f"pid-{i}")
        pids = [int((tmp_path / f"pid-{i}").read_text()) for i in range(2)]
        proc.kill()  # only the launcher, not its process group
        proc.wait(10)
        assert all(_gone(p) for p in pids), "workers outlived a SIGKILLed launcher"
    finally:
        _kill_all(pids)
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


# ------------------------------------------------------------ CLI
def _cli(capsys, *argv):
    code = cli.main(["launch", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_runs_local_workers(capfd):
    code = cli.main(
        [
            "launch",
            "-n",
            "2",
            "--startup-timeout",
            "0",
            "--",
            sys.executable,
            "-c",
            "import os; print('w', os.environ['TFDIST_LAUNCH_WORKER_INDEX'])",
        ]
    )
    out, err = capfd.readouterr()
    assert code == 0, err
    assert "[worker 0] w 0" in out and "[worker 1] w 1" in out


def test_cli_exit_code_is_first_failure(capfd):
    code = cli.main(
        [
            "launch",
            "-n",
            "2",
            "--startup-timeout",
            "0",
            "--",
            sys.executable,
            "-c",
            "import sys; sys.exit(7)",
        ]
    )
    capfd.readouterr()
    assert code == 7


@pytest.mark.parametrize(
    "argv,match",
    [
        (["-n", "2"], "nothing to launch"),
        (["--", "python", "x.py"], "Missing `-n`"),
        (["-n", "2", "--cpu-replicas", "2", "--", "python"], "`--cpu-replicas`"),
        (["-n", "0", "--", "python"], "Received: -n 0"),
        (["-n", "2", "--max-restarts", "-1", "--", "python"], "Received: --max-restarts=-1"),
        (["--slurm", "--", "python"], "Not inside a SLURM allocation"),
    ],
)
def test_cli_errors(capsys, monkeypatch, argv, match):
    monkeypatch.delenv("SLURM_JOB_NODELIST", raising=False)
    monkeypatch.delenv("SLURM_NODELIST", raising=False)
    monkeypatch.delenv("SLURM_STEP_NODELIST", raising=False)
    code, _, err = _cli(capsys, *argv)
    assert code == 2
    assert match in err, err


def test_cli_prints_srun_line_inside_slurm(capsys, monkeypatch):
    for k, v in {
        "SLURM_JOB_ID": "42",
        "SLURM_JOB_NODELIST": "node[01-02]",
        "SLURM_NTASKS": "4",
        "SLURM_TASKS_PER_NODE": "2(x2)",
    }.items():
        monkeypatch.setenv(k, v)
    code, out, _ = _cli(
        capsys, "--slurm", "--port", "3000", "--", "python", "train.py", "--lr", "0.1"
    )
    assert code == 0
    assert out.strip() == (
        f"srun --ntasks=4 --kill-on-bad-exit=1 --nodes=2 {sys.executable} -m "
        "tfdist_opt launch --slurm-task --port=3000 -- python train.py --lr 0.1"
    )


def test_slurm_task_env_is_its_own_tf_config():
    from tfdist_opt.launch import remote

    env = remote.slurm_task_env(
        {
            "SLURM_JOB_ID": "42",
            "SLURM_STEP_NODELIST": "node[01-02]",
            "SLURM_STEP_NUM_TASKS": "4",
            "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
            "SLURM_PROCID": "3",
        },
        port=3000,
    )
    cfg = tc.parse_tf_config(env["TF_CONFIG"])
    assert cfg["cluster"]["worker"] == ["node01:3000", "node01:3001", "node02:3000", "node02:3001"]
    assert cfg["task"]["index"] == 3


def test_cli_prints_per_host_commands(capsys, tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("gpu1 slots=1\ngpu2 slots=1\n")
    code, out, _ = _cli(capsys, "--hostfile", str(hostfile), "--", "python", "train.py")
    assert code == 0
    lines = [l for l in out.splitlines() if l.startswith("TF_CONFIG=")]
    assert len(lines) == 2
    assert "# worker 1 on gpu2:2222" in out
    value = lines[1].split("=", 1)[1].rsplit(" python train.py", 1)[0]
    assert json.loads(value.strip("'")) == tc.build_tf_config(
        {"worker": ["gpu1:2222", "gpu2:2222"]}, "worker", 1
    )


def test_check_own_port_only_checks_this_hosts_task():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        free = sources.free_ports(1)[0]
        cluster = {"worker": [f"node7:{port}", f"node8:{free}"]}
        mine = tc.build_tf_config(cluster, "worker", 0)
        with pytest.raises(
            launcher.PortInUseError, match=f"Port {port} for worker 0 \\(node7:{port}\\)"
        ):
            launcher.check_own_port(mine, hostnames=["node7.cluster.local"])
        launcher.check_own_port(mine, hostnames=["node8"])  # not ours: skipped
        other = tc.build_tf_config(cluster, "worker", 1)
        launcher.check_own_port(other, hostnames=["node8"])


def test_slurm_task_exits_42_through_a_stream_of_sigterms(tmp_path):
    # On a preemption every task's child exits 42 within milliseconds of the
    # others, and each task then waits its grace; the first task to end makes
    # srun SIGTERM the step while the others are still ending. A task that
    # died of that SIGTERM (143, as during Python's shutdown, which resets
    # handled signals to SIG_DFL) turned a preemption into a crash.
    started = tmp_path / "child_started"
    child = (
        f"import sys, time; open({str(started)!r}, 'w').write('1'); time.sleep(0.3); sys.exit(42)"
    )
    code = (
        "from tfdist_opt.launch import remote; remote.PREEMPTED_GRACE_S = 0.5; "
        f"remote.exec_slurm_task([{sys.executable!r}, '-c', {child!r}])"
    )
    env = dict(
        os.environ,
        SLURM_JOB_ID="1",
        SLURM_STEP_NODELIST="localhost",
        SLURM_STEP_NUM_TASKS="1",
        SLURM_STEP_TASKS_PER_NODE="1",
        SLURM_PROCID="0",
    )
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=REPO_ROOT)
    try:
        _wait_for(started)  # the task's handlers are in place once its child runs
        deadline = time.monotonic() + 30
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                os.kill(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                break
            time.sleep(0.0002)
        assert proc.wait(timeout=30) == 42
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
