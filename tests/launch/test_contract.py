"""The launch contract: one restart policy, the layout value, the backends."""

import sys

import pytest

from tfdist_opt.launch import backends
from tfdist_opt.launch import layout as layout_lib
from tfdist_opt.launch import local as local_lib
from tfdist_opt.launch.contract import LaunchResult
from tfdist_opt.launch.contract import RestartPolicy


@pytest.mark.parametrize("bad", [-1, 1.5, True, "2"])
def test_restart_policy_rejects_bad_counts_by_name(bad):
    with pytest.raises(ValueError, match=r"`--max-restarts`.*Received: --max-restarts="):
        RestartPolicy(bad)


def test_restart_policy_restarts_failures_until_success():
    codes = iter([3, 42, 0, 0])
    seen, lines = [], []

    def attempt(restarts):
        seen.append(restarts)
        return LaunchResult(next(codes), message=f"attempt {restarts}")

    result = RestartPolicy(5).run(attempt, lambda: False, lines.append)
    assert (result.returncode, result.restarts, seen) == (0, 2, [0, 1, 2])
    assert lines == [
        "attempt 0; restarting the group (restart 1 of 5)",
        "attempt 1; restarting the group (restart 2 of 5)",
    ]


def test_restart_policy_stops_at_its_limit_and_on_a_signal():
    failing = lambda restarts: LaunchResult(1)  # noqa: E731
    assert RestartPolicy(2).run(failing, lambda: False, lambda _: None).restarts == 2
    assert RestartPolicy(0).run(failing, lambda: False, lambda _: None).restarts == 0
    stopped = RestartPolicy(3).run(lambda r: LaunchResult(130), lambda: True, lambda _: None)
    assert (stopped.returncode, stopped.restarts) == (130, 0)


def test_local_layout_lists_tasks_in_start_order():
    layout = layout_lib.local_layout(2, num_ps=1, evaluator=True)
    assert [t.label for t in layout.tasks] == [
        "chief 0",
        "worker 0",
        "worker 1",
        "ps 0",
        "evaluator 0",
    ]
    assert [t.label for t in layout.training_tasks] == ["chief 0", "worker 0", "worker 1", "ps 0"]
    assert layout.cluster(["a:1", "b:2", "c:3", "d:4", "e:5"]) == {
        "chief": ["a:1"],
        "worker": ["b:2", "c:3"],
        "ps": ["d:4"],
        "evaluator": ["e:5"],
    }


def test_worker_layout_takes_n_or_min_max():
    assert layout_lib.worker_layout(3).max_workers is None
    elastic = layout_lib.worker_layout("2:4")
    assert (elastic.count("worker"), elastic.max_workers) == (2, 4)
    with pytest.raises(ValueError, match="Invalid value for `-n`"):
        layout_lib.worker_layout("3:2")


def test_unknown_backend_and_role_are_named():
    with pytest.raises(ValueError, match="Unrecognized launch backend: 'slurm'.*local, ray"):
        backends.get_backend("slurm")
    with pytest.raises(ValueError, match="Unrecognized task role: 'master'"):
        layout_lib.Task("master", 0)


def test_both_backends_take_the_same_policy(tmp_path):
    """The local loop and Ray's FailureConfig get R from one RestartPolicy."""
    from tfdist_opt.launch import ray_launch  # imports no Ray at module level

    config = ray_launch._run_config(str(tmp_path), RestartPolicy(3), elastic=False)
    assert config.failure_config.max_failures == 3


def test_local_backend_runs_the_layout_under_the_policy(tmp_path, capfd):
    marker = tmp_path / "tries"
    script = (
        "import pathlib,sys;p=pathlib.Path(sys.argv[1]);"
        "n=len(p.read_text()) if p.exists() else 0;p.write_text('x'*(n+1));"
        "sys.exit(0 if n else 3)"
    )
    backend = backends.get_backend("local", startup_timeout=None, handle_signals=False)
    result = backend.run(
        [sys.executable, "-c", script, str(marker)], layout_lib.local_layout(1), RestartPolicy(2)
    )
    assert (result.returncode, result.restarts) == (0, 1)
    assert "restarting the group (restart 1 of 2)" in capfd.readouterr().err


def test_run_local_refuses_a_layout_that_does_not_match_its_counts():
    with pytest.raises(ValueError, match="Invalid `layout`"):
        local_lib.run_local([sys.executable, "-c", "pass"], 2, layout=layout_lib.local_layout(3))
