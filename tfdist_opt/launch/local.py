"""The local launcher: N worker processes, one TF_CONFIG each, fail together.

`run_local()` is what `tfdist-opt launch -n N -- CMD` runs. It

- picks N free loopback ports (or `base_port`...), checks they are free and
  names the task whose port is taken;
- starts each worker in its own process group with its TF_CONFIG,
  `TFDIST_LAUNCH_RESTART_COUNT` (attempt number), `TFDIST_LAUNCH_WORKER_INDEX`,
  `TFDIST_LAUNCH_NUM_WORKERS` and, if asked, `TFDIST_OPT_CPU_REPLICAS`;
- streams each worker's stdout / stderr prefixed `[worker i]`;
- waits for every worker's gRPC port to accept a connection within
  `startup_timeout` seconds (TF listens once the strategy is created), so a
  worker that never joins fails the launch by name instead of the others
  waiting an hour for it;
- on the first non-zero exit, terminates the rest (SIGTERM, then SIGKILL
  after `term_timeout`) and returns that worker's code. Under
  MultiWorkerMirroredStrategy TF's preemption notifier catches SIGTERM in
  C++ (a preemption notice, not an exit), so a TF worker usually needs the
  SIGKILL — unless it trains with `DistributedBackupAndRestore`, which
  turns SIGTERM into a save on every worker at one step and exit code 42
  (tfdist_opt/callbacks/preemption.py); keep `term_timeout` above one step
  plus one save. The grace is short by default; with `max_restarts`
  it restarts the whole group instead (torchrun semantics), so a job with
  backup/restore resumes;
- forwards SIGINT / SIGTERM to every worker, and never leaves a process
  behind: on every way out each worker's process group is SIGKILLed, and
  so is every process carrying this launch's `TFDIST_LAUNCH_ID` in its
  environment (grandchildren that left the group with `setsid` included).
  If the launcher itself is SIGKILLed, a watchdog process in its own
  session (`tfdist_opt.coordination.watchdog`) sees its pipe close and does the
  same; each direct child also gets PR_SET_PDEATHSIG (Linux).

Every argument is checked before anything starts (the command exists and
is executable, ports in 1..65535, timeouts >= 0): a `ValueError` the CLI
prints as one `launch: error:` line with exit code 2.

Only this module (and `apply_tf_config`) writes environments, and only the
children's.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import sys
import tempfile
import threading
import time
from typing import IO, Mapping, Sequence

from tfdist_opt.coordination import watchdog as watchdog_lib
from tfdist_opt.coordination.task_env import TRAINING_ENDED_ENV
from tfdist_opt.launch import gpus as gpus_lib
from tfdist_opt.launch import layout as layout_lib
from tfdist_opt.launch import log_filter
from tfdist_opt.launch import process_group
from tfdist_opt.launch.checks import (  # noqa: F401  (re-exported)
    LaunchError,
    PortInUseError,
    check_command,
    check_cpu_replicas,
    check_launch_numbers,
    check_own_port,
    check_ports_free,
    port_in_use,
)
from tfdist_opt.launch.contract import EXIT_LAUNCH_ERROR
from tfdist_opt.launch.contract import LaunchResult
from tfdist_opt.launch.contract import RestartPolicy
from tfdist_opt.launch.local_envs import (  # noqa: F401  (re-exported)
    CPU_REPLICAS_ENV,
    NUM_WORKERS_ENV,
    RESTART_COUNT_ENV,
    WORKER_INDEX_ENV,
    attempt_envs,
    evaluator_env,
    local_cluster,
    ps_task_envs,
    worker_env,
)

DEFAULT_STARTUP_TIMEOUT_S = 300.0
DEFAULT_TERM_TIMEOUT_S = 5.0
_POLL_S = 0.05
_JOIN_POLL_S = 0.25


# ------------------------------------------------------------ run_local
def run_local(
    argv: Sequence[str],
    num_workers: int,
    *,
    cpu_replicas: int | None = None,
    max_restarts: int = 0,
    startup_timeout: float | None = DEFAULT_STARTUP_TIMEOUT_S,
    base_port: int | None = None,
    term_timeout: float = DEFAULT_TERM_TIMEOUT_S,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    stdout: IO[str] | None = None,
    stderr: IO[str] | None = None,
    handle_signals: bool = True,
    num_ps: int = 0,
    evaluator: bool = False,
    quiet: bool = False,
    layout: layout_lib.Layout | None = None,
    gpus_per_worker: int | None = None,
    discover_gpus=gpus_lib.discover,
) -> LaunchResult:
    """Runs `argv` as `num_workers` local workers of one cluster.

    Args:
        argv: sequence of str. The worker command, e.g.
            `[sys.executable, "train.py"]`.
        num_workers: int. Processes to start. With 1, no TF_CONFIG is set.
        cpu_replicas: int or None. Sets `TFDIST_OPT_CPU_REPLICAS` in every
            worker; values > 1 need `num_workers == 1`. Defaults to `None`.
        max_restarts: int. Whole-group restarts after a failure. Defaults
            to `0`.
        startup_timeout: float or None. Seconds for every worker's gRPC port
            to accept a connection (multi-worker only); None or 0 disables.
            Defaults to `300`.
        base_port: int or None. Worker i listens on `base_port + i`; None
            picks free ports. Defaults to `None`.
        term_timeout: float. Seconds between SIGTERM and SIGKILL when
            stopping workers. Defaults to `5`.
        env: mapping or None. Base environment (TF_CONFIG in it is
            replaced). Defaults to `os.environ`.
        cwd: str or None. Workers' working directory.
        stdout: text stream for workers' prefixed stdout. Defaults to
            `sys.stdout`; the launcher's own lines and workers' stderr go to
            `stderr` (defaults to `sys.stderr`).
        handle_signals: bool. Forward SIGINT / SIGTERM to the workers
            (main thread only). Defaults to `True`.
        num_ps: int. Parameter-server cluster: with K > 0, start a chief,
            `num_workers` workers and K ps tasks (TF_CONFIG roles chief,
            worker, ps). Defaults to `0` (workers only).
        evaluator: bool. Also start the side-car `evaluator` task (TF_CONFIG
            role `evaluator`, started last, not part of the training cluster
            and not waited for to join; it runs the same `argv`, which runs
            `tfdist_opt.SidecarEvaluator` there). Like every task, its
            failure stops the job. Needs a training cluster (`num_workers`
            >= 2, or `num_ps`): the evaluator learns that training ended
            from the chief's TF server. Defaults to `False`.
        quiet: bool. Keep TensorFlow's C++ start-up noise out of the
            output: `TF_CPP_MIN_LOG_LEVEL=2` in the workers unless `env`
            sets it, and known start-up lines dropped (see
            `tfdist_opt.launch.log_filter`). Defaults to `False`
            (`tfdist-opt launch` passes `True` unless `--verbose`).
        layout: `Layout` or None. The tasks to start, with their GPUs and
            forwarded environment (`tfdist_opt.launch.layout`); its roles
            must match `num_workers`, `num_ps` and `evaluator`. None: those
            roles, GPUs placed by `tfdist_opt.launch.gpus` (from `env`'s
            `CUDA_VISIBLE_DEVICES`, else `discover_gpus()`), nothing
            forwarded.
        gpus_per_worker: int or None. GPUs per training task when `layout`
            is None (`--gpus-per-worker`; 0: CPU only). Defaults to `None`
            (every visible GPU, split equally).
        discover_gpus: callable. Lists GPUs when `CUDA_VISIBLE_DEVICES` is
            unset. Defaults to `tfdist_opt.launch.gpus.discover`
            (`nvidia-smi -L`).

    Returns:
        `LaunchResult`.

    Raises:
        ValueError: bad arguments (see `check_cpu_replicas`).
        PortInUseError: a worker's port is taken (pre-flight).

    Example:
        >>> run_local([sys.executable, "-c", "print('hi')"], 2,
        ...           startup_timeout=None).returncode  # doctest: +SKIP
        0
    """
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
        raise ValueError(
            f"Invalid value for `-n`: expected a positive int. Received: -n {num_workers!r}"
        )
    policy = RestartPolicy(max_restarts)
    check_cpu_replicas(num_workers, cpu_replicas)
    if isinstance(num_ps, bool) or not isinstance(num_ps, int) or num_ps < 0:
        raise ValueError(
            f"Invalid value for `--ps`: expected an int >= 0. Received: --ps {num_ps!r}"
        )
    if evaluator and num_workers < 2 and not num_ps:
        raise ValueError(
            "Invalid value for `--evaluator`: the side-car evaluator needs a "
            "training cluster (it learns that training ended when the chief's "
            f"TF server goes away). Received: -n {num_workers} --evaluator. "
            "Expected -n 2 or more, or --ps K."
        )
    check_launch_numbers(num_workers, base_port, startup_timeout, term_timeout)
    base_env = dict(os.environ if env is None else env)
    check_command(argv, cwd, base_env.get("PATH", os.defpath))
    expected = layout_lib.local_layout(num_workers, num_ps, evaluator)
    if layout is None:
        layout = gpus_lib.placed_layout(
            num_workers, num_ps, evaluator, gpus_per_worker, base_env, discover_fn=discover_gpus
        )
    elif [t.label for t in layout.tasks] != [t.label for t in expected.tasks]:
        raise ValueError(
            "Invalid `layout`: its tasks must be the ones -n/--ps/--evaluator "
            f"ask for. Received: {[t.label for t in layout.tasks]}. Expected: "
            f"{[t.label for t in expected.tasks]}"
        )
    out = stdout if stdout is not None else sys.stdout
    err = stderr if stderr is not None else sys.stderr
    lock = threading.Lock()
    launcher = _Launcher(out, err, lock)
    if quiet:
        base_env, set_level = log_filter.quiet_env(base_env)
        launcher.keep = log_filter.StartupNoiseFilter(log_filter.min_log_level(base_env))
        if set_level:
            launcher.log(
                "TensorFlow C++ INFO/WARNING lines hidden in workers "
                "(TF_CPP_MIN_LOG_LEVEL=2; --verbose shows them)"
            )
    launcher.watchdog = watchdog_lib.Watchdog(watchdog_lib.new_launch_id())
    old_handlers = launcher.install_signal_handlers() if handle_signals else {}

    def attempt(restarts: int) -> LaunchResult:
        envs, labels, ports, where = attempt_envs(
            layout,
            base_env,
            base_port,
            cpu_replicas,
            restarts,
            launcher.scratch if evaluator else None,
        )
        what = f"{len(envs)} task(s)" if num_ps else f"{num_workers} worker(s)"
        launcher.log(
            f"starting {what} {where} (attempt "
            f"{restarts + 1} of {policy.attempts}): {shlex.join(argv)}"
        )
        return launcher.run_attempt(argv, envs, ports, startup_timeout, term_timeout, cwd, labels)

    try:
        result = policy.run(attempt, lambda: launcher.stop_signal is not None, launcher.log)
        launcher.log(result.message + launcher.hidden_note())
        return result
    finally:
        launcher.watchdog.close()
        if launcher.scratch_dir is not None:
            shutil.rmtree(launcher.scratch_dir, ignore_errors=True)
        for signum, handler in old_handlers.items():
            signal.signal(signum, handler)


def _killed_note(late: list[str], term_timeout: float, signal_name: str) -> str:
    """' (worker 1 SIGKILLed: ...)' for workers the grace period did not see out."""
    if not late:
        return ""
    return (
        f" ({', '.join(late)} SIGKILLed: still running {term_timeout:g} s "
        f"after {signal_name}; --term-timeout sets the grace)"
    )


class _Launcher:
    """State shared across attempts: output, lock, the signal we got."""

    def __init__(self, out, err, lock):
        self.out, self.err, self.lock = out, err, lock
        self.stop_signal: int | None = None
        self.group: process_group.Group | None = None
        self.watchdog: watchdog_lib.Watchdog | None = None
        self.keep: log_filter.StartupNoiseFilter | None = None
        self.scratch_dir: str | None = None  # removed when the launch ends

    def scratch(self) -> str:
        if self.scratch_dir is None:
            self.scratch_dir = tempfile.mkdtemp(prefix="tfdist-launch-")
        return self.scratch_dir

    def hidden_note(self) -> str:
        hidden = self.keep.hidden if self.keep is not None else 0
        return (
            f" ({hidden} TensorFlow start-up line(s) hidden; --verbose shows them)"
            if hidden
            else ""
        )

    def log(self, message: str) -> None:
        with self.lock:
            try:
                self.err.write(f"[launch] {message}\n")
                self.err.flush()
            except (ValueError, OSError):
                pass

    def install_signal_handlers(self) -> dict:
        if threading.current_thread() is not threading.main_thread():
            return {}
        old = {}
        for signum in (signal.SIGINT, signal.SIGTERM):
            old[signum] = signal.signal(signum, self._on_signal)
        return old

    def _on_signal(self, signum, frame):
        del frame
        if self.stop_signal is not None and self.group is not None:
            self.group.signal_all(signal.SIGKILL)  # second signal: no grace
        self.stop_signal = signum
        if self.group is not None:
            self.group.signal_all(signum)

    def run_attempt(
        self, argv, envs, ports, startup_timeout, term_timeout, cwd, labels=None
    ) -> LaunchResult:
        n = len(envs)
        labels = labels or [f"worker {i}" for i in range(n)]
        self.group = group = process_group.Group(
            argv, envs, cwd, self.out, self.err, self.lock, self.watchdog, self.keep, labels
        )
        # The side-car evaluator (last) learns here that training ended.
        ended_file = envs[-1].get(TRAINING_ENDED_ENV) if labels[-1] == "evaluator 0" else None
        try:
            if self.stop_signal is not None:  # arrived while spawning
                group.signal_all(self.stop_signal)
            start = time.monotonic()
            joined = [False] * len(ports)
            next_join_poll = start
            while True:
                codes = [p.poll() for p in group.procs]
                if self.stop_signal is not None:  # already forwarded
                    late = group.terminate(term_timeout, signum=None)
                    name = signal.Signals(self.stop_signal).name
                    return LaunchResult(
                        128 + self.stop_signal,
                        message=f"got {name}; stopped {n} worker(s)"
                        + _killed_note(late, term_timeout, name),
                    )
                failed = [i for i, c in enumerate(codes) if c not in (None, 0)]
                if failed:
                    i = failed[0]
                    code = codes[i]
                    group.terminate(term_timeout)
                    return LaunchResult(
                        process_group.exit_code(code),
                        failed_worker=i,
                        message=f"{labels[i]} {process_group.describe_code(code)}; "
                        f"stopped the other {n - 1} worker(s)",
                    )
                if all(c == 0 for c in codes):
                    group.kill()  # reap anything left in their groups
                    return LaunchResult(0, message=f"all {n} worker(s) finished")
                if ended_file and all(c == 0 for c in codes[:-1]):
                    open(ended_file, "x").close()  # the evaluator's cue to stop
                    ended_file = None
                now = time.monotonic()
                if ports and not all(joined) and now >= next_join_poll:
                    for i, port in enumerate(ports):
                        if not joined[i] and (codes[i] == 0 or process_group.accepts(port)):
                            joined[i] = True
                    next_join_poll = now + _JOIN_POLL_S
                    if all(joined):
                        self.log(
                            f"all {len(ports)} workers joined (TF servers "
                            f"listening) {now - start:.1f} s after start"
                        )
                    if not all(joined) and startup_timeout and now - start > startup_timeout:
                        late = [i for i, ok in enumerate(joined) if not ok]
                        group.terminate(term_timeout)
                        names = ", ".join(f"{labels[i]} (localhost:{ports[i]})" for i in late)
                        return LaunchResult(
                            EXIT_LAUNCH_ERROR,
                            failed_worker=late[0],
                            message=f"{names} did not join within "
                            f"{startup_timeout:g} s (its TF server never "
                            "listened: is the strategy created early, "
                            "and does the script start?); stopped all "
                            "workers",
                        )
                time.sleep(_POLL_S)
        finally:
            group.kill()
            self.group = None
