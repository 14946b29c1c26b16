"""Commands for real clusters: the `srun` line, per-host command lines.

The local launcher runs processes itself; on a real cluster the scheduler
(or the user) starts one process per host. These pure functions produce those
command lines, each with the task's TF_CONFIG; `exec_slurm_task` is what each
`srun` task runs to derive its own TF_CONFIG from SLURM's variables.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from typing import Mapping, Sequence

from tfdist_opt.cluster import sources
from tfdist_opt.cluster import tf_config as tf_config_lib
from tfdist_opt.launch import gpus as gpus_lib


def srun_command(
    argv: Sequence[str],
    environ: Mapping[str, str] | None = None,
    port: int = sources.DEFAULT_PORT,
    python: str | None = None,
    gpus_per_task: int | None = None,
) -> list[str]:
    """The `srun` line that runs `argv` once per task of this allocation.

    Each task runs `python -m tfdist_opt launch --slurm-task --port P -- argv`,
    which builds its TF_CONFIG from `SLURM_PROCID` and the step's node list
    and runs the command (`exec_slurm_task`). `--kill-on-bad-exit=1` gives the local
    launcher's fail-together behaviour. With `gpus_per_task` K, SLURM
    binds K GPUs to each task (`--gpus-per-task=K`) and sets its
    `CUDA_VISIBLE_DEVICES`: the same per-worker count as `launch -n N
    --gpus-per-worker K` and `--ray`.

    Raises:
        ValueError: not inside a SLURM allocation (no node list).
    """
    environ = os.environ if environ is None else environ
    src = sources.slurm_cluster(environ, port=port)  # validates
    cmd = ["srun", f"--ntasks={len(src.addresses)}", "--kill-on-bad-exit=1"]
    nodes = {tf_config_lib.split_address(a)[0] for a in src.addresses}
    cmd.append(f"--nodes={len(nodes)}")
    if gpus_lib.check_gpus_per_worker(gpus_per_task):
        cmd.append(f"--gpus-per-task={gpus_per_task}")
    cmd += [
        python or sys.executable,
        "-m",
        "tfdist_opt",
        "launch",
        "--slurm-task",
        f"--port={port}",
        "--",
        *argv,
    ]
    return cmd


def run_srun(line: Sequence[str]) -> int:  # pragma: no cover - runs srun
    """Runs the `srun` line and returns its exit code; SIGTERM and SIGINT wait.

    SLURM delivers its own SIGTERM to the tasks (`--signal`, `scancel
    --signal=TERM`, a requeue or a preemption); each task then saves and
    exits 42. A SIGTERM that reaches this process (`scancel --full`, a
    requeue: SLURM signals every process of the batch step) must neither end
    it at once (143, while `srun` and the saving tasks still run, and a batch
    script's retry loop would start a second step beside them) nor go on to
    `srun`, which turns a SIGTERM of its own into a SIGKILL of every task
    (srun(1)). So this process keeps waiting and returns `srun`'s code, the
    tasks' own. A Ctrl-C reaches `srun` from the terminal itself (its first
    prints the step's status, a second within a second cancels the step).
    """
    proc = subprocess.Popen(list(line))
    old = {s: signal.signal(s, lambda signum, frame: None) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        return proc.wait()
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def slurm_task_env(
    environ: Mapping[str, str] | None = None, port: int = sources.DEFAULT_PORT
) -> dict[str, str]:
    """Pure: this SLURM task's environment with its TF_CONFIG applied."""
    environ = dict(os.environ if environ is None else environ)
    src = sources.slurm_cluster(environ, port=port)
    if src.index is None:
        raise ValueError(
            "--slurm-task runs inside an srun task: SLURM_PROCID is unset. "
            "Received: SLURM_PROCID=None"
        )
    cfg = (
        tf_config_lib.build_tf_config({"worker": list(src.addresses)}, "worker", src.index)
        if len(src.addresses) > 1
        else None
    )
    tf_config_lib.apply_tf_config(cfg, environ)
    return environ


# `tfdist_opt.callbacks.preemption.PREEMPTION_EXIT_CODE` (not imported: this
# layer never imports TensorFlow).
PREEMPTED_EXIT_CODE = 42
# How long a task that saved on preemption waits before it exits (below).
PREEMPTED_GRACE_S = 10.0


def exec_slurm_task(
    argv: Sequence[str], port: int = sources.DEFAULT_PORT
) -> None:  # pragma: no cover - runs in an srun task, ends the process
    """Runs `argv` with this task's TF_CONFIG and exits with its code.

    The training process is a child, not an `exec`: after a preemption
    save (exit 42) this task waits `PREEMPTED_GRACE_S` before it exits. The
    `srun` line has `--kill-on-bad-exit=1`, so the first task to exit 42
    would otherwise get the others killed while they, having saved at the
    same step, are still exiting: on a real cluster the step then ended
    with 143 (the killed task's SIGTERM) instead of 42 and the batch script
    could not tell a preemption from a crash. Any other exit code passes
    through at once (a crash still stops the step at once). SLURM signals
    every process of the step, so the child gets its SIGTERM directly; this
    process ignores SIGTERM and SIGINT and only waits.

    The tasks' children exit within milliseconds of each other, so the
    other tasks are still in their own grace when the first one's exit
    makes `srun` SIGTERM the step. That SIGTERM must not end them: the
    handlers become `SIG_IGN` once the child is gone (Python's own
    shutdown resets handled signals to `SIG_DFL`, and a SIGTERM in that
    window ended a task with 143), and the process ends with `os._exit`,
    with no interpreter shutdown at all.
    """
    env = slurm_task_env(os.environ, port=port)
    # A Python-level handler, not SIG_IGN, while the child starts: an
    # ignored signal would stay ignored in the child across exec.
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda signum, frame: None)
    code = subprocess.Popen(list(argv), env=env).wait()
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, signal.SIG_IGN)
    if code == PREEMPTED_EXIT_CODE:
        time.sleep(PREEMPTED_GRACE_S)
    sys.stdout.flush()
    sys.stderr.flush()
    if code < 0:  # killed by a signal: end the same way
        if -code != signal.SIGKILL:
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code if code >= 0 else 128 - code)


def per_host_commands(
    cluster: Mapping[str, Sequence[str]], argv: Sequence[str]
) -> list[tuple[str, str, int, str]]:
    """One shell line per task: `(address, task_type, index, "TF_CONFIG=... CMD")`.

    Example:
        >>> per_host_commands({"worker": ["h1:2222", "h2:2222"]},
        ...                   ["python", "train.py"])[1][3]
        'TF_CONFIG=\\'{"cluster":{"worker":["h1:2222","h2:2222"]},"task":{"type":"worker","index":1}}\\' python train.py'
    """
    cluster = {r: list(v) for r, v in cluster.items()}
    out = []
    for task_type, index in tf_config_lib.all_tasks(cluster):
        cfg = tf_config_lib.build_tf_config(cluster, task_type, index)
        line = f"TF_CONFIG={shlex.quote(tf_config_lib.dumps_tf_config(cfg))} " + shlex.join(argv)
        out.append((cluster[task_type][index], task_type, index, line))
    return out
