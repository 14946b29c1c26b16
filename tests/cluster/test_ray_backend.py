"""The Ray backend's pure parts and its held ports (no Ray cluster started)."""

import json
import os
import socket
import subprocess
import sys

import pytest

pytest.importorskip("ray.train")

from tfdist_opt.callbacks import ray_checkpoints  # pylint: disable=g-import-not-at-top
from tfdist_opt.cli import launch as launch_cli  # pylint: disable=g-import-not-at-top
from tfdist_opt.launch import ray_backend  # pylint: disable=g-import-not-at-top
from tfdist_opt.launch import ray_elastic  # pylint: disable=g-import-not-at-top
from tfdist_opt.launch import ray_launch  # pylint: disable=g-import-not-at-top
from tfdist_opt.launch import ray_worker  # pylint: disable=g-import-not-at-top


@pytest.mark.parametrize(
    "text,want", [("2", (2, None)), (3, (3, None)), ("1:2", (1, 2)), (" 2 : 4 ", (2, 4))]
)
def test_parse_workers(text, want):
    assert ray_launch.parse_workers(text) == want


@pytest.mark.parametrize("text", ["0", "2:1", "a", "1:", "-1", True])
def test_parse_workers_rejects(text):
    with pytest.raises(ValueError, match=r"Invalid value for `-n`.*Received: -n"):
        ray_launch.parse_workers(text)


def test_python_target():
    assert ray_launch.python_target(["python", "t.py", "--x", "1"]) == (
        "path",
        "t.py",
        ["t.py", "--x", "1"],
    )
    assert ray_launch.python_target([sys.executable, "-m", "pkg.mod", "a"]) == (
        "module",
        "pkg.mod",
        ["pkg.mod", "a"],
    )
    for bad in (["bash", "t.sh"], ["python"], ["python", "-c", "print(1)"]):
        with pytest.raises(ValueError, match="Invalid command for `--ray`"):
            ray_launch.python_target(bad)


def test_worker_environment():
    env = ray_backend.worker_environment(["127.0.0.1:1", "127.0.0.1:2"], 1, 3)
    assert json.loads(env.pop("TF_CONFIG")) == {
        "cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"]},
        "task": {"type": "worker", "index": 1},
    }
    assert env == {
        "TFDIST_LAUNCH_WORKER_INDEX": "1",
        "TFDIST_LAUNCH_NUM_WORKERS": "2",
        "TFDIST_LAUNCH_RESTART_COUNT": "3",
    }
    one = ray_backend.worker_environment(["127.0.0.1:1"], 0)
    assert one["TF_CONFIG"] == ""  # removed: one process, no server


@pytest.mark.parametrize(
    "argv,message",
    [
        (["-n", "2:3", "--", "python", "t.py"], "MIN:MAX (elastic) needs --ray"),
        (["--ray", "-n", "2", "--ps", "1", "--", "python", "t.py"], "`--ps` with --ray"),
        (["--ray", "--", "python", "t.py"], "Missing `-n`"),
        (["--ray", "-n", "2", "--", "bash", "t.sh"], "Invalid command for `--ray`"),
        (["--ray", "-n", "2", "--", "python", "no_such_script.py"], "no script"),
        (["--ray-storage", "/x", "-n", "2", "--", "python", "t.py"], "needs --ray"),
    ],
)
def test_cli_errors_before_ray_starts(argv, message, capsys):
    assert launch_cli.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err, err


def test_train_context_is_none_outside_ray_train():
    assert ray_checkpoints.train_context() is None


def test_held_port_is_taken_by_no_other_bind_and_tf_binds_it():
    """The pick-to-bind race is closed: while held, a port-0 bind never gets
    the port and a plain bind of it fails; TF's server binds it anyway."""
    code = """
import socket, sys
from tfdist_opt.launch import ray_backend
port = ray_backend.reserve_port()
s = socket.socket()
try:
    s.bind(("127.0.0.1", port))
    sys.exit("a plain bind took the held port")
except OSError:
    pass
import tensorflow as tf
server = tf.distribute.Server({"worker": [f"localhost:{port}"]}, job_name="worker",
                              task_index=0, start=True)
socket.create_connection(("127.0.0.1", port), timeout=5).close()
print("OK", port)
"""
    r = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert r.returncode == 0 and "OK" in r.stdout, r.stdout + r.stderr[-2000:]


def test_released_port_is_free_again():
    port = ray_backend.reserve_port()
    ray_backend.release_ports()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_exit_code_from_rays_error():
    class Failed(Exception):
        worker_failures = {
            0: RuntimeError("ActorDiedError: the actor died"),
            1: RuntimeError(str(ray_worker.WorkerExit(42, 1))),
        }

    assert ray_launch._exit_code(Failed("x"))[:2] == (42, 1)  # pylint: disable=protected-access
    Failed.worker_failures = {1: RuntimeError("ActorDiedError: the actor died")}
    code, rank, message = ray_launch._exit_code(Failed("x"))  # pylint: disable=protected-access
    assert (code, rank) == (1, 1) and "the actor died" in message


@pytest.mark.parametrize(
    "body,code",
    [
        ("pass", 0),
        ("import sys; sys.exit(42)", 42),
        ("raise ValueError('x')", 1),
        ("import sys; sys.exit('bad')", 1),
        ("import sys; sys.exit(None)", 0),
    ],
)
def test_run_target_exit_codes(tmp_path, body, code):
    script = tmp_path / "s.py"
    script.write_text(body + "\n")
    assert ray_worker.run_target("path", str(script), [str(script)]) == code


def _listening():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    return server


def _refusing_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now: connect is refused
    return port


def test_settle_lost_nodes_waits_for_ray_to_declare_a_dead_raylet(monkeypatch):
    # Node b's raylet refuses connections while Ray still lists it alive:
    # the restart waits until Ray declares it dead, then refreshes the
    # elastic view, so it is sized from node a alone.
    server = _listening()
    try:
        live = {
            "NodeID": "a" * 8,
            "Alive": True,
            "NodeManagerAddress": "127.0.0.1",
            "NodeManagerPort": server.getsockname()[1],
        }
        lost = {
            "NodeID": "b" * 8,
            "Alive": True,
            "NodeManagerAddress": "127.0.0.1",
            "NodeManagerPort": _refusing_port(),
        }
        calls, refreshed = [], []

        def nodes():
            calls.append(1)
            return [live, dict(lost, Alive=len(calls) < 4)]

        monkeypatch.setattr(ray_elastic.ray, "nodes", nodes)
        monkeypatch.setattr(
            ray_elastic, "refresh_elastic_view", lambda: refreshed.append(len(calls))
        )
        assert ray_elastic.settle_lost_nodes(wait_s=30) == ["b" * 8]
        assert refreshed == [4]  # after Ray's 4th answer: b dead
        # Nothing unreachable (a script failed on its own, or Ray declared
        # the node dead already): no wait, but a refresh all the same, since
        # the elastic view counts a dead node until its next 20 s refresh.
        calls.clear()
        monkeypatch.setattr(ray_elastic.ray, "nodes", lambda: calls.append(1) or [live])
        assert ray_elastic.settle_lost_nodes(wait_s=30) == []
        assert refreshed == [4, 1]
    finally:
        server.close()


def test_settle_lost_nodes_gives_up_after_wait_s(monkeypatch):
    lost = {
        "NodeID": "c" * 8,
        "Alive": True,
        "NodeManagerAddress": "127.0.0.1",
        "NodeManagerPort": _refusing_port(),
    }
    refreshed = []
    monkeypatch.setattr(ray_elastic.ray, "nodes", lambda: [lost])
    monkeypatch.setattr(ray_elastic, "refresh_elastic_view", lambda: refreshed.append(1))
    assert ray_elastic.settle_lost_nodes(wait_s=0.3) == ["c" * 8]
    assert refreshed == [1]


def test_refresh_elastic_view_without_a_coordinator_returns_at_once(monkeypatch):
    # Without Ray Train's coordinator actor (a fixed-size group) it only
    # looks the actor up by name: no call to create it, no settle wait.
    import time  # pylint: disable=g-import-not-at-top

    looked_up = []

    def no_actor(name, namespace=None):
        looked_up.append((name, namespace))
        raise ValueError(f"Failed to look up actor {name} in {namespace}")

    monkeypatch.setattr(ray_elastic.ray, "get_actor", no_actor)
    t0 = time.monotonic()
    assert ray_elastic.refresh_elastic_view(settle_s=5) is False
    assert time.monotonic() - t0 < 2
    assert looked_up == [("AutoscalingCoordinator", "AutoscalingCoordinator")]


def test_lost_node_callback_settles_before_a_restart_only(monkeypatch):
    # Ray Train's controller calls the hook before it executes a failure
    # decision; only a RETRY restarts (and sizes) a group.
    from ray.train.v2._internal.execution.failure_handling import FailureDecision  # pylint: disable=g-import-not-at-top

    settled = []
    monkeypatch.setattr(
        ray_elastic, "settle_lost_nodes", lambda wait_s, **kw: settled.append(wait_s) or []
    )
    callback = ray_elastic.LostNodeCallback(wait_s=7)
    callback.before_controller_execute_failure_decision(FailureDecision.RAISE)
    assert settled == []
    callback.before_controller_execute_failure_decision(FailureDecision.RETRY)
    assert settled == [7]


def test_lost_node_callback_refreshes_a_running_groups_view(monkeypatch):
    # A node that joins is seen at the next resize check, not after Ray's
    # 20 s tick: every `refresh_s`, while the group runs, the coordinator
    # recomputes (not waited on).
    from ray.train.v2._internal.execution.controller.state import (  # pylint: disable=g-import-not-at-top
        RunningState,
        SchedulingState,
    )

    calls = []

    class Method:
        def remote(self, *args, **kwargs):
            calls.append((args, kwargs))

    class Coordinator:
        get_reserved_resources = Method()

    monkeypatch.setattr(ray_elastic.ray, "get_actor", lambda name, namespace=None: Coordinator())
    now = [1000.0]
    monkeypatch.setattr(ray_elastic.time, "monotonic", lambda: now[0])
    callback = ray_elastic.LostNodeCallback(refresh_s=3)
    now[0] = -5e6  # the controller's host: its clock does not compare with ours
    running = RunningState()
    callback.after_controller_state_update(running, running)
    assert calls == []  # none within refresh_s of the first update
    now[0] += 3.5
    callback.after_controller_state_update(running, SchedulingState(None))
    assert calls == []  # not running
    callback.after_controller_state_update(running, running)
    callback.after_controller_state_update(running, running)
    assert calls == [(("tfdist_opt",), {"recompute": True})]
    now[0] += 3.5
    callback.after_controller_state_update(running, running)
    assert len(calls) == 2
    assert ray_elastic.LostNodeCallback(refresh_s=60).refresh_s == 20  # Ray's tick


def test_elastic_launch_gives_ray_train_the_lost_node_callback(tmp_path):
    assert ray_launch._run_config(str(tmp_path), 0, elastic=False).callbacks == []
    config = ray_launch._run_config(str(tmp_path), 3, elastic=True, resize_interval_s=3)
    assert [type(c) for c in config.callbacks] == [ray_elastic.LostNodeCallback]
    assert config.callbacks[0].refresh_s == 3
    assert config.failure_config.max_failures == 3


def test_the_launchers_ray_side_imports_no_tensorflow():
    """`launch --ray` and Ray's train controller run no TF op: the backend
    config and the trainer the launcher builds leave TensorFlow unloaded
    (Ray's `ray.train.tensorflow` imports it: 3-4 CPU-seconds a process)."""
    code = (
        "import sys, tempfile, ray.train\n"
        "from tfdist_opt.launch import ray_backend, ray_launch\n"
        "cfg = ray_backend.TensorflowConfig()\n"
        "trainer = ray_launch._trainer({}, cfg, ray.train.ScalingConfig(num_workers=(1, 2)),\n"
        "    ray_launch._run_config(tempfile.mkdtemp(), 1, elastic=True))\n"
        "assert trainer.backend_config is cfg\n"
        "print(cfg.framework.value, cfg.to_dict(), cfg.backend_cls.__name__)\n"
        "assert 'tensorflow' not in sys.modules, 'tensorflow imported'\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["tensorflow", "{}", "_Backend"], r.stdout
