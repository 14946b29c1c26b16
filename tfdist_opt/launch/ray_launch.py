"""The Ray backend of the launcher contract: `tfdist-opt launch --ray`.

The contract (`tfdist_opt.launch.contract`, shared with
`tfdist_opt.launch.local.run_local`, the local-process backend): given N
(or MIN:MAX) workers and a command, place them, hand each its TF_CONFIG,
stream their output prefixed `[worker i]`, return one exit code
(`LaunchResult`), restart the whole group as the `RestartPolicy` says, and
leave nothing running. Here Ray's own pieces do the work: Ray
Train V2's `DataParallelTrainer` (Ray's `TensorflowTrainer` is that trainer
with a TF backend config; ours is `ray_backend.TensorflowConfig`, which
keeps TensorFlow out of this process) places the workers (`ScalingConfig`),
restarts the group (`FailureConfig(max_failures=R)`) and stores
checkpoints (`RunConfig(storage_path=...)`); TF_CONFIG comes from
`tfdist_opt.launch.ray_backend.TensorflowConfig` (node addresses, held
ports).

The command must be a Python script or module (`python train.py ...`,
`python -m pkg.train ...`): it runs inside each Ray Train worker process
(`runpy`, with `sys.argv` set), so `opt_strategy()` and
`DistributedBackupAndRestore` there see Ray Train and report backups to
it. The script's exit code is its worker's: 0 ends the worker; any other
code (42 after a preemption save) fails the attempt, and Ray restarts the
group while restarts remain. A worker process that dies (SIGKILL, a lost
node) fails the attempt the same way (exit code 1: Ray does not say which
signal).

Output: each worker's file descriptors 1 and 2 (Python and TF's C++ logs)
are piped through a `ray.util.queue.Queue` to this process, which prints
them prefixed `[worker i]` (world rank) to its stdout / stderr.
Ray's own per-actor log forwarding is off (`log_to_driver=False`).

Ray: with `address=None` a local Ray instance is started for the run and
shut down after it (with `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`, so every
address is 127.0.0.1); with an address (`auto`, `ray://...`, `host:port`)
the run joins that cluster and only disconnects at the end (its actors end
with the job). Workers start in the launcher's working directory when it
exists on their node; on a multi-node cluster, ship code with Ray's
`runtime_env` (`RAY_RUNTIME_ENV` is not set here) and give a storage path
all nodes share (`storage_path`).
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

from tfdist_opt.cluster.ports import LaunchError
from tfdist_opt.launch import env_forward
from tfdist_opt.launch import gpus as gpus_lib
from tfdist_opt.launch import ray_auth
from tfdist_opt.launch import ray_driver
from tfdist_opt.launch import ray_resources
from tfdist_opt.launch import ray_worker
from tfdist_opt.launch.contract import LaunchResult
from tfdist_opt.launch.contract import RestartPolicy
from tfdist_opt.launch.layout import parse_workers  # noqa: F401  (re-exported)
from tfdist_opt.launch.ray_worker import python_target  # noqa: F401  (re-exported)


# Ray Train V2's controller takes at most one `ray.train.report` (one backup)
# per poll of its workers, every RAY_TRAIN_HEALTH_CHECK_INTERVAL_S (2 s by
# default; its result queue holds one report), so a worker backing up more
# often than that waits in `report`: 12 backups of a short run cost ~22 s.
# The launcher polls every 0.5 s unless that variable is set.
REPORT_POLL_ENV = "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"
REPORT_POLL_S = "0.5"


# The failed attempt's exit code, worker and message (`ray_worker.exit_code`).
_exit_code = ray_worker.exit_code


def run_ray(
    argv: Sequence[str],
    num_workers,
    *,
    address: str | None = None,
    max_restarts: int = 0,
    storage_path: str | None = None,
    resize_interval_s: float | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    stdout: IO[str] | None = None,
    stderr: IO[str] | None = None,
    quiet: bool = True,
    handle_signals: bool = True,
    gpus_per_worker: int | None = None,
) -> LaunchResult:
    """Runs `python SCRIPT ...` as Ray Train workers; the launcher contract.

    Args:
        argv: sequence of str. `[python, script.py, args...]` or
            `[python, -m, module, args...]`.
        num_workers: int or str. N, or "MIN:MAX" (Ray elastic:
            `ScalingConfig(num_workers=(MIN, MAX))`).
        address: str or None. A Ray cluster to join; None starts a local
            one for the run (stopped after it). Defaults to `None`.
        max_restarts: int. Group restarts after a failure
            (`FailureConfig(max_failures=R)`). Defaults to `0`.
        storage_path: str or None. Ray Train's checkpoint storage; None: a
            temporary directory removed after the run (fine for one node).
        resize_interval_s: float or None. With MIN:MAX, how often Ray
            considers growing a healthy group (Ray's
            `elastic_resize_monitor_interval_s`; None: Ray's default, 60 s).
        env: mapping or None. Variables set in each worker before the
            script runs, on every node (`tfdist-opt launch --ray` passes the
            launcher's `TFDIST_OPT_*` / `TF_*` and `--env`; see
            `tfdist_opt.launch.env_forward`); the start line names them.
        cwd: str or None. Workers' working directory. Defaults to this
            process's.
        stdout: text stream for the workers' stdout. Defaults to sys.stdout.
        stderr: text stream for the workers' stderr and `[launch]` lines.
        quiet: bool. `TF_CPP_MIN_LOG_LEVEL=2` in workers unless `env` or
            this environment sets it. Defaults to `True`.
        handle_signals: bool. SIGINT / SIGTERM stop the run (main thread
            only). Defaults to `True`.
        gpus_per_worker: int or None. GPUs each worker asks Ray for
            (`ScalingConfig(use_gpu=True, resources_per_worker={"GPU": K})`;
            Ray then sets each worker's `CUDA_VISIBLE_DEVICES` to its own);
            0: CPU only (`CUDA_VISIBLE_DEVICES=""`). None: 1 when the
            cluster has GPUs, else none. More than the cluster has is a
            `ValueError` right after joining, not a wait for resources; so
            are MIN workers the nodes cannot hold (1 CPU each without GPUs;
            `tfdist_opt.launch.ray_resources`).

    Returns:
        `LaunchResult`.

    Raises:
        ValueError: bad arguments, before Ray starts.
        ImportError: Ray Train is not installed (`pip install tfdist_opt[ray]`).
    """
    lo, hi = parse_workers(num_workers)
    policy = RestartPolicy(max_restarts)
    gpus_lib.check_gpus_per_worker(gpus_per_worker)
    if resize_interval_s is not None and (
        isinstance(resize_interval_s, bool)
        or not isinstance(resize_interval_s, (int, float))
        or not resize_interval_s >= 0
        or hi is None
    ):
        raise ValueError(
            "Invalid value for `--ray-resize-interval`: expected seconds >= 0 "
            "with an elastic -n MIN:MAX. Received: --ray-resize-interval="
            f"{resize_interval_s!r} with -n {num_workers}"
        )
    kind, target, args = python_target(argv)
    cwd = os.path.abspath(cwd or os.getcwd())
    if kind == "path":
        target = os.path.join(cwd, target)
        if not os.path.isfile(target):
            raise ValueError(
                f"Invalid command for `--ray`: no script {target}. Received: {shlex.join(argv)}"
            )
    forward_note = env_forward.describe(env or {})
    worker_env = dict(env or {})
    if quiet and "TF_CPP_MIN_LOG_LEVEL" not in os.environ:
        worker_env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    worker_env.setdefault("PYTHONUNBUFFERED", "1")
    # Ray Train V2 turns print() in workers into log records; the workers'
    # output reaches this process through their file descriptors instead.
    worker_env.setdefault("RAY_TRAIN_ENABLE_PRINT_PATCH", "0")
    runtime_env = {"env_vars": dict(worker_env)}
    # A cluster that wants its token: found and sent, or a named error now
    # instead of ~20 s of Ray's retries. Before `import ray`: Ray reads
    # RAY_AUTH_MODE when its config first loads.
    auth_set, auth_note = ({}, "") if address is None else ray_auth.prepare(address)
    os.environ.update(auth_set)
    try:
        import ray  # pylint: disable=g-import-not-at-top
        from ray import train as ray_train  # pylint: disable=g-import-not-at-top
        from ray.util.queue import Queue  # pylint: disable=g-import-not-at-top
        from tfdist_opt.launch import ray_backend  # pylint: disable=g-import-not-at-top
    except ImportError as e:
        raise ImportError(
            f"`tfdist-opt launch --ray` needs Ray Train: pip install 'tfdist_opt[ray]' ({e})"
        ) from e
    out = stdout if stdout is not None else sys.stdout
    err = stderr if stderr is not None else sys.stderr
    lock = threading.Lock()

    def log(message):
        with lock:
            err.write(f"[launch] {message}\n")
            err.flush()

    stop = {"signum": None}
    old_handlers = {}
    if handle_signals and threading.current_thread() is threading.main_thread():

        def on_signal(signum, frame):
            del frame
            stop["signum"] = signum
            raise KeyboardInterrupt

        for s in (signal.SIGINT, signal.SIGTERM):
            old_handlers[s] = signal.signal(s, on_signal)
    own_storage = storage_path is None
    storage = storage_path or tempfile.mkdtemp(prefix="tfdist_opt_ray_")
    t0 = time.monotonic()
    pump = None
    poll_was = os.environ.get(REPORT_POLL_ENV)
    try:
        # Read from this process's environment when Ray Train starts its
        # controller, which passes it on.
        os.environ.setdefault(REPORT_POLL_ENV, REPORT_POLL_S)
        if address is None:
            os.environ[ray_backend.PIN_LOOPBACK_ENV] = "0"
            # "local": a Ray of our own even when another instance runs
            # here (with no address Ray joins the newest one it finds, and
            # then refuses num_cpus).
            ray.init(
                address="local",
                num_cpus=max(hi or lo, os.cpu_count() or 1),
                include_dashboard=False,
                log_to_driver=False,
                configure_logging=False,
                runtime_env=runtime_env,
            )
        else:
            try:
                ray.init(
                    address=address,
                    log_to_driver=False,
                    configure_logging=False,
                    runtime_env=runtime_env,
                )
            except ConnectionError as e:
                raise LaunchError(
                    f"Cannot join the Ray cluster at `--ray {address}`: "
                    f"{str(e).strip().splitlines()[-1]} (is it running, and "
                    "does this process have its auth token?)"
                ) from e
        log(
            f"Ray {'local instance started' if address is None else 'joined at ' + address}"
            f" in {time.monotonic() - t0:.1f} s" + (f" ({auth_note})" if auth_note else "")
        )
        gpus, gpu_note = gpus_lib.ray_request(
            gpus_per_worker, ray.cluster_resources().get("GPU", 0), lo
        )
        # Room on the nodes for MIN workers: a named error now, not a silent wait.
        ray_resources.check_room(
            ray.nodes(), lo, {"GPU": gpus} if gpus else {"CPU": 1}, str(num_workers)
        )
        if gpus_per_worker == 0:  # Ray sets no CUDA_VISIBLE_DEVICES then
            worker_env[gpus_lib.GPU_ENV] = ""
        head = ray_driver.on_head_node()  # a lost node must not take these along
        logs = Queue(actor_options={"num_cpus": 0, "scheduling_strategy": head})
        attempts = ray_driver.attempts_actor(head)
        pump = ray_driver.Pump(logs, out, err, lock)
        pump.start()
        workers = lo if hi is None else (lo, hi)
        trainer = _trainer(
            {
                "env": worker_env,
                "cwd": cwd,
                "kind": kind,
                "quiet": quiet,
                "target": target,
                "args": args,
                "logs": logs,
            },
            ray_backend.TensorflowConfig(attempts=attempts),
            ray_train.ScalingConfig(
                num_workers=workers,
                **({"use_gpu": True, "resources_per_worker": {"GPU": gpus}} if gpus else {}),
                **(
                    {}
                    if resize_interval_s is None
                    else {"elastic_resize_monitor_interval_s": float(resize_interval_s)}
                ),
            ),
            _run_config(
                storage,
                policy,
                elastic=hi is not None,
                resize_interval_s=resize_interval_s,
                notices=logs,
            ),
        )
        log(
            f"starting {workers if hi is None else f'{lo}..{hi}'} Ray worker(s) "
            f"(up to {policy.attempts} attempt(s))"
            + "".join(f"; {n}" for n in (gpu_note, forward_note) if n)
            + f": {shlex.join(argv)}"
        )
        try:
            trainer.fit()
            code, failed, message = 0, None, "all Ray workers finished"
        except KeyboardInterrupt:
            signum = stop["signum"] or signal.SIGINT
            code, failed = 128 + signum, None
            message = f"got {signal.Signals(signum).name}; stopped the Ray workers"
        except Exception as e:  # pylint: disable=broad-except
            code, failed, message = _exit_code(e)
        try:
            restarts = max(0, int(ray.get(attempts.count.remote(), timeout=10)))
        except Exception:  # pylint: disable=broad-except
            restarts = 0
        pump.stop()
        log(f"{message} ({restarts} restart(s), {time.monotonic() - t0:.1f} s)")
        return LaunchResult(code, restarts=restarts, failed_worker=failed, message=message)
    finally:
        if pump is not None:
            pump.stop()
        ray.shutdown()
        if address is None:
            os.environ.pop(ray_backend.PIN_LOOPBACK_ENV, None)
        if poll_was is None:
            os.environ.pop(REPORT_POLL_ENV, None)
        for name in auth_set:
            os.environ.pop(name, None)
        if own_storage:
            shutil.rmtree(storage, ignore_errors=True)
        for s, h in old_handlers.items():
            signal.signal(s, h)


def _run_config(
    storage: str,
    policy: RestartPolicy | int,
    elastic: bool,
    resize_interval_s: float | None = None,
    notices=None,
):
    """Ray Train's RunConfig: storage, restarts, and for MIN:MAX the callback
    that sizes a restart after a lost node from the nodes left and keeps the
    elastic view as fresh as the resize checks (`resize_interval_s`); its
    notices of lost nodes go to `notices` (the log queue: `[launch]` lines).

    The restart policy is the launch contract's (`RestartPolicy`), carried
    out by Ray Train's controller: `FailureConfig(max_failures=R)` restarts
    the group after a failed attempt, as the local backend's loop does.
    """
    if not isinstance(policy, RestartPolicy):
        policy = RestartPolicy(policy)
    from ray import train as ray_train  # pylint: disable=g-import-not-at-top
    from tfdist_opt.launch import ray_elastic  # pylint: disable=g-import-not-at-top

    return ray_train.RunConfig(
        storage_path=storage,
        name="tfdist_opt_launch",
        failure_config=ray_train.FailureConfig(max_failures=policy.max_restarts),
        callbacks=[
            ray_elastic.LostNodeCallback(
                refresh_s=max(1.0, resize_interval_s or 60.0), notices=notices
            )
        ]
        if elastic
        else [],
    )


def _trainer(train_loop_config, backend_config, scaling_config, run_config):
    """Ray Train's trainer running `ray_worker.worker_loop` on each worker.

    Ray's `TensorflowTrainer` is `DataParallelTrainer` with a TF backend
    config; importing it (`ray.train.tensorflow`) imports TensorFlow, which
    this process never uses, so the trainer is built from Ray's base class
    with our `ray_backend.TensorflowConfig`.
    """
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer  # pylint: disable=g-import-not-at-top

    return DataParallelTrainer(
        ray_worker.worker_loop,
        train_loop_config=train_loop_config,
        backend_config=backend_config,
        scaling_config=scaling_config,
        run_config=run_config,
    )
