"""GPU placement: one rule, decided before anything starts (no GPU needed)."""

import subprocess
import sys

import pytest

from tfdist_opt.launch import gpus
from tfdist_opt.launch import remote

FOUR = {"CUDA_VISIBLE_DEVICES": "0,1,2,3"}


def _gpus(layout):
    return {t.label: t.gpus for t in layout.tasks}


def test_visible_gpus_split_into_disjoint_equal_slices():
    layout = gpus.placed_layout(2, env=FOUR)
    assert _gpus(layout) == {"worker 0": ("0", "1"), "worker 1": ("2", "3")}
    assert layout.gpu_note == (
        "GPUs (CUDA_VISIBLE_DEVICES=0,1,2,3): worker 0 -> 0,1; worker 1 -> 2,3"
    )


def test_uuids_split_as_they_are_and_k_picks_the_slice():
    uuids = "GPU-aaaa-1,GPU-bbbb-2,MIG-cccc/1/0"
    layout = gpus.placed_layout(3, gpus_per_worker=1, env={"CUDA_VISIBLE_DEVICES": uuids})
    assert [t.gpus for t in layout.tasks] == [("GPU-aaaa-1",), ("GPU-bbbb-2",), ("MIG-cccc/1/0",)]
    assert _gpus(gpus.placed_layout(2, gpus_per_worker=1, env=FOUR)) == {
        "worker 0": ("0",),
        "worker 1": ("1",),
    }


def test_ps_get_none_and_the_evaluator_a_slice_only_if_one_is_left():
    found = lambda: ("0", "1", "2", "3")  # noqa: E731  (stand-in for nvidia-smi)
    layout = gpus.placed_layout(
        2, num_ps=1, evaluator=True, gpus_per_worker=1, env={}, discover_fn=found
    )
    assert _gpus(layout) == {
        "chief 0": ("0",),
        "worker 0": ("1",),
        "worker 1": ("2",),
        "ps 0": (),
        "evaluator 0": ("3",),
    }
    assert "nvidia-smi -L: 0,1,2,3" in layout.gpu_note
    full = gpus.placed_layout(2, evaluator=True, env=FOUR)  # 2 x 2: none left
    assert full.tasks[-1].gpus == ()


def test_zero_is_cpu_only_and_no_gpu_changes_nothing():
    cpu = gpus.placed_layout(2, gpus_per_worker=0, env=FOUR)
    assert [t.gpus for t in cpu.tasks] == [(), ()]
    assert "2 unused" not in cpu.gpu_note and "4 unused" in cpu.gpu_note
    plain = gpus.placed_layout(2, env={}, discover_fn=lambda: ())
    assert [t.gpus for t in plain.tasks] == [None, None] and plain.gpu_note == ""
    hidden = gpus.placed_layout(2, env={"CUDA_VISIBLE_DEVICES": "-1"})
    assert [t.gpus for t in hidden.tasks] == [None, None]  # CUDA's "none"


@pytest.mark.parametrize(
    "env, k, match",
    [
        ({"CUDA_VISIBLE_DEVICES": "0,1,2"}, None, r"Invalid GPU split: 3 GPU\(s\)"),
        (FOUR, 3, r"`--gpus-per-worker`: 2 training task\(s\) x 3 GPU\(s\) need 6, but 4"),
        ({"CUDA_VISIBLE_DEVICES": "0,1,1"}, 1, r"each GPU may appear once.*1 repeated"),
        ({"CUDA_VISIBLE_DEVICES": "0,gpu1"}, 1, r"entry 'gpu1'"),
        (FOUR, -1, r"`--gpus-per-worker`: expected an int >= 0"),
    ],
)
def test_bad_requests_are_named(env, k, match):
    with pytest.raises(ValueError, match=match):
        gpus.placed_layout(2, gpus_per_worker=k, env=env)


def test_discovery_parses_nvidia_smi_without_tensorflow():
    listing = (
        "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\nGPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-2)\n"
    )
    run = lambda *a, **k: subprocess.CompletedProcess(a, 0, listing, "")  # noqa: E731
    assert gpus.discover(run, which=lambda _: "/usr/bin/nvidia-smi") == ("0", "1")
    assert gpus.discover(run, which=lambda _: None) == ()


def test_ray_default_is_one_per_worker_and_too_many_is_named():
    assert gpus.ray_request(None, 0, 2) == (0, "")
    k, note = gpus.ray_request(None, 2, 2)
    assert k == 1 and "the default when the Ray cluster has GPUs" in note
    with pytest.raises(
        ValueError,
        match=r"2 Ray worker\(s\) x 2 GPU\(s\) need 4, but "
        r"the Ray cluster has 2",
    ):
        gpus.ray_request(2, 2.0, 2)


def test_srun_line_carries_gpus_per_task():
    env = {"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_NTASKS": "2", "SLURM_TASKS_PER_NODE": "1(x2)"}
    assert "--gpus-per-task=2" in remote.srun_command(["python", "t.py"], env, gpus_per_task=2)
    assert not any(a.startswith("--gpus") for a in remote.srun_command(["python", "t.py"], env))


def test_launch_hands_each_worker_its_slice_and_says_so(tmp_path):
    script = tmp_path / "show.py"
    script.write_text("import os\nprint('CVD=' + os.environ['CUDA_VISIBLE_DEVICES'])\n")
    from tfdist_opt.cli import launch as cli
    import io
    from tfdist_opt.launch import local

    out, err = io.StringIO(), io.StringIO()
    layout = gpus.placed_layout(2, env=FOUR)
    result = local.run_local(
        [sys.executable, str(script)],
        2,
        layout=layout,
        env=dict(FOUR, PATH="/usr/bin:/bin"),
        startup_timeout=None,
        stdout=out,
        stderr=err,
        handle_signals=False,
    )
    assert result.returncode == 0, err.getvalue()
    assert "[worker 0] CVD=0,1" in out.getvalue()
    assert "[worker 1] CVD=2,3" in out.getvalue()
    assert "worker 0 -> 0,1; worker 1 -> 2,3" in err.getvalue().splitlines()[0]
    del cli


def test_launch_refuses_too_many_gpus_before_starting(tmp_path, monkeypatch, capsys):
    from tfdist_opt.cli import launch as cli

    marker = tmp_path / "started"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    code = cli.main(
        [
            "-n",
            "2",
            "--gpus-per-worker",
            "2",
            "--",
            sys.executable,
            "-c",
            f"open({str(marker)!r}, 'w')",
        ]
    )
    assert code == 2 and not marker.exists()
    assert "need 4, but 2 are visible" in capsys.readouterr().err


def test_cli_names_gpus_per_worker_where_it_cannot_apply(capsys):
    from tfdist_opt.cli import launch as cli

    code = cli.main(
        ["--workers", "h1:2222,h2:2222", "--gpus-per-worker", "1", "--", "python", "t.py"]
    )
    assert code == 2
    assert "`--gpus-per-worker` with a host list" in capsys.readouterr().err


def test_cli_srun_line_has_gpus_per_task(monkeypatch, capsys):
    from tfdist_opt.cli import launch as cli

    for k, v in {
        "SLURM_JOB_NODELIST": "n[1-2]",
        "SLURM_NTASKS": "2",
        "SLURM_TASKS_PER_NODE": "1(x2)",
    }.items():
        monkeypatch.setenv(k, v)
    assert cli.main(["--slurm", "--gpus-per-worker", "2", "--", "python", "t.py"]) == 0
    assert "--gpus-per-task=2" in capsys.readouterr().out
