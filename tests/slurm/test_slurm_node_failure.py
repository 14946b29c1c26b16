"""A node of a running `--requeue` job dies; SLURM requeues the job, which resumes.

The docs' batch script (40 epochs instead of 2) on 2 of 3 nodes; the node
that is not the batch host loses its slurmd and its task at once (SIGKILL of
everything in that host). The controller marks it DOWN after SlurmdTimeout,
requeues the job (`--requeue`), and the next run, on the two nodes left,
resumes from the newest backup to the weights of an uninterrupted run.
"""

from __future__ import annotations

import re

import pytest

from tests.slurm import jobs
from tfdist_opt.cluster.sources import expand_nodelist

pytestmark = [pytest.mark.multiworker, pytest.mark.slow]

SLURM_NODES = 3
SLURMD_TIMEOUT_S = 20


def test_a_dead_node_requeues_the_job_and_it_resumes_on_the_others(slurm, submit_dir, tmp_path):
    epochs = 40
    path = jobs.long_job(submit_dir, epochs)
    reference = jobs.reference(tmp_path / "reference", epochs)
    job_id = slurm.sbatch([str(path)], cwd=str(submit_dir))
    jobs.wait_output(slurm, submit_dir, job_id, rf"^Epoch 4/{epochs}$", 2, timeout=180)
    job = slurm.job(job_id)
    batch_host = job["BatchHost"]
    (other,) = [
        n
        for n in ("tfn1", "tfn2", "tfn3")
        if n != batch_host and n in expand_nodelist(job["NodeList"])
    ]
    slurm.kill_node(int(other[3:]))

    jobs.wait_requeued(slurm, job_id, restarts=1)
    assert slurm.node_states()[other].startswith("down"), slurm.node_states()
    job = slurm.wait_job(job_id, ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), timeout=300)
    out = jobs.output(submit_dir, job_id)
    assert job["JobState"] == "COMPLETED" and job["ExitCode"] == "0:0", (job, out[-4000:])
    assert job["Restarts"] == "1" and other not in expand_nodelist(job["NodeList"]), job
    runs = out.split("[launch] running: srun")
    assert out.count(f"optimizer steps so far: {8 * epochs}") == 2, out[-4000:]
    first = re.search(rf"^Epoch (\d+)/{epochs}$", runs[-1], re.M)
    assert first and int(first.group(1)) > 1, runs[-1][-3000:]  # resumed, not restarted
    jobs.finish(reference, timeout=300)
    assert jobs.digest(submit_dir / "backups" / jobs.JOB_NAME) == jobs.digest(
        tmp_path / "reference"
    )
