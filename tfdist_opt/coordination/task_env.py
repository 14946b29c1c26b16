"""The environment a launcher hands each task: the variable names, in one place.

Set by every `tfdist_opt.launch` backend, read by the code in the task
(the Ray worker loop, the side-car evaluator). Pure constants.
"""

RESTART_COUNT_ENV = "TFDIST_LAUNCH_RESTART_COUNT"  # attempt number, from 0
WORKER_INDEX_ENV = "TFDIST_LAUNCH_WORKER_INDEX"  # the worker's rank
NUM_WORKERS_ENV = "TFDIST_LAUNCH_NUM_WORKERS"  # workers in this attempt
CPU_REPLICAS_ENV = "TFDIST_OPT_CPU_REPLICAS"  # `--cpu-replicas K`
# A file the launcher creates once every training task exited: the
# side-car evaluator's cue to run its last evaluation and stop.
TRAINING_ENDED_ENV = "TFDIST_LAUNCH_TRAINING_ENDED_FILE"
