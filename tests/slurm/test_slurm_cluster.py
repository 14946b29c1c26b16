"""The SLURM deploy path on a real SLURM cluster (tests/slurm/cluster.py).

Debian's slurmctld and one slurmd per emulated host run the docs' batch
script (`docs/examples/slurm_job.sh`) as a person submits it, requeue it as
SLURM does on preemption, and start `tfdist-opt launch --slurm` inside an
allocation: what the Deploy page's SLURM section promises, checked against
the scheduler rather than hand-set SLURM variables.
"""

from __future__ import annotations

import json
import re
import sys

import pytest

from tests.slurm import jobs

pytestmark = [pytest.mark.multiworker, pytest.mark.slow]

SLURM_NODES = 2


def _loss_lines(text: str) -> list[str]:
    return re.findall(r"^\d+/\d+ - .*loss: ([\d.]+)$", text, re.M)


def test_docs_job_script_trains_on_two_nodes_like_launch_n_2(slurm, submit_dir, tmp_path):
    reference = jobs.reference(tmp_path / "reference")
    job_id = slurm.sbatch([jobs.SCRIPT], cwd=str(submit_dir))
    job = slurm.wait_job(job_id, ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), timeout=240)
    out = jobs.output(submit_dir, job_id)
    assert job["JobState"] == "COMPLETED" and job["ExitCode"] == "0:0", (job, out[-4000:])
    assert job["NodeList"] == "tfn[1-2]", job
    assert job["StdOut"] == str(submit_dir / f"{jobs.JOB_NAME}-{job_id}.out"), job
    # One srun step over both nodes, one task per node.
    assert "[launch] running: srun --ntasks=2 --kill-on-bad-exit=1 --nodes=2 " in out, out
    # Both tasks trained to the end, in step: every epoch's loss printed twice, alike.
    assert out.count("optimizer steps so far: 16") == 2, out[-4000:]
    losses = _loss_lines(out)
    assert len(losses) == 4 and losses[0::2] == losses[1::2], out[-4000:]
    jobs.finish(reference, timeout=240)
    backups = (
        submit_dir / "backups" / jobs.JOB_NAME
    )  # the script's $PWD/backups/$SLURM_jobs.JOB_NAME
    assert jobs.digest(backups) == jobs.digest(tmp_path / "reference")


def test_requeue_and_scancel_term_resume_from_the_backup_with_equal_weights(
    slurm, submit_dir, tmp_path
):
    # The docs' script with the example trained for 40 epochs (320 steps)
    # instead of 2, so that there is time to interrupt it mid-training.
    epochs = 40
    path = jobs.long_job(submit_dir, epochs)
    reference = jobs.reference(tmp_path / "reference", epochs)
    job_id = slurm.sbatch([str(path)], cwd=str(submit_dir))

    # 1. `scancel --signal=TERM`: SIGTERM to the tasks of the job's steps (as
    # `--signal=TERM@120` sends it before the time limit). They save at one
    # step and exit 42; the script requeues the job.
    jobs.wait_output(slurm, submit_dir, job_id, rf"^Epoch 3/{epochs}$", 2, timeout=180)
    slurm.client(["scancel", "--signal=TERM", job_id])
    jobs.wait_output(slurm, submit_dir, job_id, r"task \d: Exited with exit code 42$", 2, 120)
    jobs.wait_requeued(slurm, job_id, restarts=1)

    # 2. `scontrol requeue` of the running job: SIGTERM to every process of
    # the job (srun too, which then SIGKILLs its tasks: they save only if
    # faster), SIGKILL after KillWait, back in the queue. The next run
    # resumes from the newest backup, the preemption save or a periodic one.
    jobs.wait_output(slurm, submit_dir, job_id, r"^\[launch\] running: srun", 2, timeout=120)
    so_far = len(re.findall(rf"^Epoch \d+/{epochs}$", jobs.output(submit_dir, job_id), re.M))
    jobs.wait_output(slurm, submit_dir, job_id, rf"^Epoch \d+/{epochs}$", so_far + 4, timeout=180)
    slurm.client(["scontrol", "requeue", job_id])
    jobs.wait_requeued(slurm, job_id, restarts=2)

    job = slurm.wait_job(job_id, ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), timeout=300)
    out = jobs.output(submit_dir, job_id)
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
    jobs.finish(reference, timeout=300)
    assert jobs.digest(submit_dir / "backups" / jobs.JOB_NAME) == jobs.digest(
        tmp_path / "reference"
    )


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
