#!/bin/bash
# A SLURM batch job: 2 nodes, one TensorFlow worker per node.
# Submit from the repository root: sbatch docs/examples/slurm_job.sh
#SBATCH --job-name=tfdist-opt
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=8
#SBATCH --time=01:00:00
#SBATCH --signal=TERM@120
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=%x-%j.out

# --signal=TERM@120: SLURM sends SIGTERM to every task 2 minutes before the
# time limit; DistributedBackupAndRestore then saves and the tasks exit 42.
# --requeue: a preempted job, or one whose node failed, goes back in the
# queue under the same job id; --open-mode=append keeps every run's output in
# the one %x-%j.out file (job name, job id) in the directory sbatch ran in.

set -uo pipefail
source .venv/bin/activate  # tfdist_opt installed at the same path on every node
BACKUPS="$PWD/backups/$SLURM_JOB_NAME"  # shared storage that every node sees

# A SIGTERM to this shell too (scontrol requeue, a preemption, scancel --full)
# must not end it before the workers are done: note it, let the launch below
# return the workers' exit code, and do not start another attempt.
stopping=0
trap 'stopping=1; echo "batch script: SIGTERM; waiting for the workers" >&2' TERM

# One srun step over the allocation; each task builds its TF_CONFIG from
# SLURM's variables. A failed attempt resumes from the newest backup; a
# preempted one (exit 42: every worker saved) requeues the job, which
# resumes from that backup when SLURM starts it again.
for attempt in 1 2 3; do
  tfdist-opt launch --slurm --run -- python docs/examples/fault_tolerance.py "$BACKUPS"
  code=$?
  if [ "$code" -eq 0 ]; then
    exit 0
  fi
  if [ "$code" -eq 42 ]; then
    echo "preempted: the workers saved a backup; requeueing job $SLURM_JOB_ID" >&2
    scontrol requeue "$SLURM_JOB_ID"
    exit 42
  fi
  if [ "$stopping" -eq 1 ]; then
    exit "$code"
  fi
  echo "attempt $attempt failed (exit $code); restarting from the newest backup" >&2
done
exit 1
