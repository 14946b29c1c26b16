"""Submitting the docs' SLURM job script and checking what it did, for tests."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

from tests.hosts import testbed as testbed_lib

REPO = testbed_lib.REPO_ROOT
SCRIPT = os.path.join(REPO, "docs", "examples", "slurm_job.sh")
JOB_NAME = "tfdist-opt"  # the script's --job-name
TRAIN_LINE = 'docs/examples/fault_tolerance.py "$BACKUPS"'


def reference(backup_dir, epochs: int | None = None) -> subprocess.Popen:
    """`tfdist-opt launch -n 2` of the script's training command, uninterrupted."""
    argv = [sys.executable, "-m", "tfdist_opt", "launch", "-n", "2", "--", sys.executable]
    argv += [os.path.join(REPO, "docs", "examples", "fault_tolerance.py"), str(backup_dir)]
    if epochs is not None:
        argv.append(str(epochs))
    # Its own temporary directory: a worker's backup code sweeps leftover
    # temporary backup directories of its worker index from the temporary
    # directory, and the SLURM job's tasks run on this machine too.
    tmp = f"{backup_dir}-tmp"
    os.makedirs(tmp, exist_ok=True)
    return subprocess.Popen(
        argv,
        cwd=REPO,
        env=testbed_lib.TestBed.env({"TMPDIR": tmp}),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def finish(proc: subprocess.Popen, timeout: float) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        testbed_lib.TestBed.kill(proc)
        out, _ = proc.communicate()
        pytest.fail(f"reference run did not end within {timeout} s:\n{out[-3000:]}")
    assert proc.returncode == 0, out[-3000:]
    return out


def digest(backup_dir) -> str:
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


def output(submit_dir, job_id: str) -> str:
    """The job's output file, where the SLURM page says: %x-%j.out where sbatch ran."""
    path = submit_dir / f"{JOB_NAME}-{job_id}.out"
    return path.read_text(errors="replace") if path.exists() else ""


def wait_output(slurm, submit_dir, job_id: str, pattern: str, count: int, timeout: float):
    deadline = time.monotonic() + timeout
    while len(re.findall(pattern, output(submit_dir, job_id), re.M)) < count:
        if time.monotonic() > deadline:
            pytest.fail(
                f"job {job_id}: {count} x {pattern!r} not in its output after {timeout} s; "
                f"job: {slurm.job(job_id)}\n{output(submit_dir, job_id)[-4000:]}\n{slurm.logs()}"
            )
        time.sleep(0.5)


def wait_requeued(slurm, job_id: str, restarts: int) -> None:
    """Waits until a requeued job is back in the queue after run `restarts`.

    SLURM starts it again `cluster.CRED_EXPIRE_S` seconds after the requeue.
    """
    job = slurm.wait_job(job_id, ("PENDING",), timeout=90)
    assert job["Restarts"] == str(restarts), job


def long_job(submit_dir, epochs: int):
    """The docs' script with the example trained for `epochs` epochs (8 steps
    each) instead of 2, so that there is time to interrupt it mid-training."""
    text = open(SCRIPT).read()
    assert text.count(TRAIN_LINE) == 1, "the script's training line changed"
    path = submit_dir / "long_job.sh"
    path.write_text(text.replace(TRAIN_LINE, f"{TRAIN_LINE} {epochs}"))
    return path
