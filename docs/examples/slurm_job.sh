#!/bin/bash
# A SLURM batch job: 2 nodes, one TensorFlow worker per node.
# Submit from the repository root: sbatch docs/examples/slurm_job.sh
#SBATCH --job-name=tfdist-opt
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=8
#SBATCH --time=01:00:00
#SBATCH --signal=TERM@120
#SBATCH --output=%x-%j.out

# --signal=TERM@120: SLURM sends SIGTERM to every task 2 minutes before the
# time limit; DistributedBackupAndRestore then saves and the tasks exit 42.

set -uo pipefail
source .venv/bin/activate  # tfdist_opt installed at the same path on every node
BACKUPS="$PWD/backups/$SLURM_JOB_NAME"  # shared storage that every node sees

# One srun step over the allocation; each task builds its TF_CONFIG from
# SLURM's variables. A failed attempt resumes from the newest backup.
for attempt in 1 2 3; do
  if tfdist-opt launch --slurm --run -- python docs/examples/fault_tolerance.py "$BACKUPS"; then
    exit 0
  fi
  echo "attempt $attempt failed; restarting from the newest backup" >&2
done
exit 1
