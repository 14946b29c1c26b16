"""The SLURM deploy path on a real SLURM cluster (tests/slurm/cluster.py).

Debian's slurmctld and one slurmd per emulated host run the docs' batch
script (`docs/examples/slurm_job.sh`) as a person submits it, requeue it as
SLURM does on preemption, and start `tfdist-opt launch --slurm` inside an
allocation: what the Deploy page's SLURM section promises, checked against
the scheduler rather than hand-set SLURM variables.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from tests.hosts import testbed as testbed_lib

pytestmark = [pytest.mark.multiworker, pytest.mark.slow]

SLURM_NODES = 2
REPO = testbed_lib.REPO_ROOT
SCRIPT = os.path.join(REPO, "docs", "examples", "slurm_job.sh")
JOB_NAME = "tfdist-opt"  # the script's --job-name
TRAIN_LINE = 'docs/examples/fault_tolerance.py "$BACKUPS"'


def _reference(backup_dir, epochs: int | None = None) -> subprocess.Popen:
    """`tfdist-opt launch -n 2` of the script's training command, uninterrupted."""
    argv = [sys.executable, "-m", "tfdist_opt", "launch", "-n", "2", "--", sys.executable]
    argv += [os.path.join(REPO, "docs", "examples", "fault_tolerance.py"), str(backup_dir)]
    if epochs is not None:
        argv.append(str(epochs))
    return subprocess.Popen(
        argv,
        cwd=REPO,
        env=testbed_lib.TestBed.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def _finish(proc: subprocess.Popen, timeout: float) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        testbed_lib.TestBed.kill(proc)
        out, _ = proc.communicate()
        pytest.fail(f"reference run did not end within {timeout} s:\n{out[-3000:]}")
    assert proc.returncode == 0, out[-3000:]
    return out


def _digest(backup_dir) -> str:
    """`step S variables V sha256 H` of the newest backup in `backup_dir`."""
    p = subprocess.run(
        [sys.executable, "-m", "tests.slurm.weights", str(backup_dir)],
        cwd=REPO,
        env=testbed_lib.TestBed.env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout.strip().splitlines()[-1]


def _output(submit_dir, job_id: str) -> str:
    """The job's output file, where the SLURM page says: %x-%j.out where sbatch ran."""
    path = submit_dir / f"{JOB_NAME}-{job_id}.out"
    return path.read_text(errors="replace") if path.exists() else ""


def _wait_output(slurm, submit_dir, job_id: str, pattern: str, count: int, timeout: float):
    deadline = time.monotonic() + timeout
    while len(re.findall(pattern, _output(submit_dir, job_id), re.M)) < count:
        if time.monotonic() > deadline:
            pytest.fail(
                f"job {job_id}: {count} x {pattern!r} not in its output after {timeout} s; "
                f"job: {slurm.job(job_id)}\n{_output(submit_dir, job_id)[-4000:]}"
            )
        time.sleep(0.5)


def _release(slurm, job_id: str, restarts: int) -> None:
    """Starts a requeued job now instead of after SLURM's requeue delay.

    SLURM holds a requeued batch job back for about 2 minutes (its
    EligibleTime); the test does not wait that long.
    """
    job = slurm.wait_job(job_id, ("PENDING",), timeout=90)
    assert job["Reason"] == "BeginTime" and job["Restarts"] == str(restarts), job
    slurm.client(["scontrol", "update", f"JobId={job_id}", "StartTime=now"])


def _loss_lines(text: str) -> list[str]:
    return re.findall(r"^\d+/\d+ - .*loss: ([\d.]+)$", text, re.M)


def test_docs_job_script_trains_on_two_nodes_like_launch_n_2(slurm, submit_dir, tmp_path):
    reference = _reference(tmp_path / "reference")
    job_id = slurm.sbatch([SCRIPT], cwd=str(submit_dir))
    job = slurm.wait_job(job_id, ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), timeout=240)
    out = _output(submit_dir, job_id)
    assert job["JobState"] == "COMPLETED" and job["ExitCode"] == "0:0", (job, out[-4000:])
    assert job["NodeList"] == "tfn[1-2]", job
    assert job["StdOut"] == str(submit_dir / f"{JOB_NAME}-{job_id}.out"), job
    # One srun step over both nodes, one task per node.
    assert "[launch] running: srun --ntasks=2 --kill-on-bad-exit=1 --nodes=2 " in out, out
    # Both tasks trained to the end, in step: every epoch's loss printed twice, alike.
    assert out.count("optimizer steps so far: 16") == 2, out[-4000:]
    losses = _loss_lines(out)
    assert len(losses) == 4 and losses[0::2] == losses[1::2], out[-4000:]
    _finish(reference, timeout=240)
    backups = submit_dir / "backups" / JOB_NAME  # the script's $PWD/backups/$SLURM_JOB_NAME
    assert _digest(backups) == _digest(tmp_path / "reference")


def test_requeue_and_scancel_term_resume_from_the_backup_with_equal_weights(
    slurm, submit_dir, tmp_path
):
    # The docs' script with the example trained for 40 epochs (320 steps)
    # instead of 2, so that there is time to interrupt it mid-training.
    text = open(SCRIPT).read()
    assert text.count(TRAIN_LINE) == 1, "the script's training line changed"
    long_job = submit_dir / "long_job.sh"
    long_job.write_text(text.replace(TRAIN_LINE, TRAIN_LINE + " 40"))
    epochs = 40
    reference = _reference(tmp_path / "reference", epochs)
    job_id = slurm.sbatch([str(long_job)], cwd=str(submit_dir))

    # 1. `scancel --signal=TERM`: SIGTERM to the tasks of the job's steps (as
    # `--signal=TERM@120` sends it before the time limit). They save at one
    # step and exit 42; the script requeues the job.
    _wait_output(slurm, submit_dir, job_id, rf"^Epoch 3/{epochs}$", 2, timeout=180)
    slurm.client(["scancel", "--signal=TERM", job_id])
    _wait_output(slurm, submit_dir, job_id, r"task \d: Exited with exit code 42$", 2, 120)
    _release(slurm, job_id, restarts=1)

    # 2. `scontrol requeue` of the running job: SIGTERM to every process of
    # the job (srun too, which then SIGKILLs its tasks: they save only if
    # faster), SIGKILL after KillWait, back in the queue. The next run
    # resumes from the newest backup, the preemption save or a periodic one.
    _wait_output(slurm, submit_dir, job_id, r"^\[launch\] running: srun", 2, timeout=120)
    so_far = len(re.findall(rf"^Epoch \d+/{epochs}$", _output(submit_dir, job_id), re.M))
    _wait_output(slurm, submit_dir, job_id, rf"^Epoch \d+/{epochs}$", so_far + 4, timeout=180)
    slurm.client(["scontrol", "requeue", job_id])
    _release(slurm, job_id, restarts=2)

    job = slurm.wait_job(job_id, ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), timeout=300)
    out = _output(submit_dir, job_id)
    assert job["JobState"] == "COMPLETED" and job["ExitCode"] == "0:0", (job, out[-4000:])
    assert job["Restarts"] == "2", job
    # Three runs in the one output file (--open-mode=append); the first
    # saved on SIGTERM on both tasks (exit 42, as the exit-code reference
    # says) and the script requeued the job; the last trained to the end.
    runs = out.split("[launch] running: srun")[1:]
    assert len(runs) == 3, out[-4000:]
    assert f"requeueing job {job_id}" in runs[0], runs[0][-3000:]
    saves = re.findall(r"preempted; worker_(\d) saved at step (\d+)", runs[0])
    assert sorted(w for w, _ in saves) == ["0", "1"] and len({s for _, s in saves}) == 1, saves
    assert "attempt 1 failed" not in out, out[-4000:]  # a stopped job does not retry in place
    assert out.count(f"optimizer steps so far: {8 * epochs}") == 2, out[-4000:]
    # Resumed, not restarted: the later runs began mid-training.
    first_epochs = [re.search(rf"^Epoch (\d+)/{epochs}$", r, re.M) for r in runs]
    assert first_epochs[0] and first_epochs[0].group(1) == "1", runs[0][-3000:]
    assert all(m and int(m.group(1)) > 1 for m in first_epochs[1:]), out[-4000:]
    _finish(reference, timeout=300)
    assert _digest(submit_dir / "backups" / JOB_NAME) == _digest(tmp_path / "reference")


_SHOW_TASK = (
    "import json, os, socket; c = json.loads(os.environ['TF_CONFIG']); "
    "print('TASK', json.dumps({'host': socket.gethostname(), "
    "'procid': int(os.environ['SLURM_PROCID']), 'localid': int(os.environ['SLURM_LOCALID']), "
    "'cluster': c['cluster'], 'task': c['task']}), flush=True)"
)


def test_launch_slurm_in_salloc_takes_the_layout_from_slurm(slurm, submit_dir):
    p = slurm.client(
        [
            "salloc", "--nodes=2", "--ntasks-per-node=2", "--cpus-per-task=1",
            sys.executable, "-m", "tfdist_opt", "launch", "--slurm", "--run", "--port=2300",
            "--", sys.executable, "-c", _SHOW_TASK,
        ],
        timeout=120,
        cwd=str(submit_dir),
        check=False,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout
    assert "srun --ntasks=4 --kill-on-bad-exit=1 --nodes=2 " in p.stdout, p.stdout
    tasks = sorted(
        (
            json.loads(line.split("TASK ", 1)[1])
            for line in p.stdout.splitlines()
            if "TASK " in line
        ),
        key=lambda t: t["procid"],
    )
    workers = ["tfn1:2300", "tfn1:2301", "tfn2:2300", "tfn2:2301"]
    assert [t["procid"] for t in tasks] == [0, 1, 2, 3], p.stdout
    for t in tasks:
        assert t["cluster"] == {"worker": workers}, t
        assert t["task"] == {"type": "worker", "index": t["procid"]}, t
        # Each task listens on its own node, port = first port + its rank on the node.
        assert workers[t["procid"]] == f"{t['host']}:{2300 + t['localid']}", t
