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
  behind: every group is SIGKILLed on the way out, and on Linux each worker
  dies with the launcher (PR_SET_PDEATHSIG) even if it is SIGKILLed.

Only this module (and `apply_tf_config`) writes environments, and only the
children's.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import IO, Mapping, Sequence

from tfdist_opt.cluster import sources
from tfdist_opt.cluster import tf_config as tf_config_lib

RESTART_COUNT_ENV = "TFDIST_LAUNCH_RESTART_COUNT"
WORKER_INDEX_ENV = "TFDIST_LAUNCH_WORKER_INDEX"
NUM_WORKERS_ENV = "TFDIST_LAUNCH_NUM_WORKERS"
CPU_REPLICAS_ENV = "TFDIST_OPT_CPU_REPLICAS"
DEFAULT_STARTUP_TIMEOUT_S = 300.0
DEFAULT_TERM_TIMEOUT_S = 5.0
EXIT_LAUNCH_ERROR = 1  # a worker never joined / the launch itself failed
_POLL_S = 0.05
_JOIN_POLL_S = 0.25


class LaunchError(RuntimeError):
    """The launch could not start (port taken, bad arguments)."""


class PortInUseError(LaunchError):
    """A task's port is already bound by another process."""


@dataclasses.dataclass
class LaunchResult:
    """How a launch ended.

    Attributes:
        returncode: int. 0 on success; the first failing worker's exit code
            (128+N for a worker killed by signal N); 128+N when the launcher
            got signal N; `EXIT_LAUNCH_ERROR` when a worker never joined.
        restarts: int. Group restarts performed.
        failed_worker: int or None. Index of the worker that failed last.
        message: str. Why it ended, for humans.
    """

    returncode: int
    restarts: int = 0
    failed_worker: int | None = None
    message: str = ""


# ------------------------------------------------------------ pure checks
def check_cpu_replicas(num_workers: int, cpu_replicas: int | None) -> None:
    """`--cpu-replicas K>1` only makes sense for one process (no TF_CONFIG).

    MultiWorkerMirroredStrategy uses one CPU device per worker, and
    `opt_strategy` rejects `cpu_replicas > 1` under multi-worker, so the
    launcher says so before starting anything.
    """
    if cpu_replicas is None:
        return
    if isinstance(cpu_replicas, bool) or not isinstance(cpu_replicas, int) \
            or cpu_replicas < 0:
        raise ValueError(
            "Invalid value for `--cpu-replicas`: expected an int >= 0. "
            f"Received: --cpu-replicas={cpu_replicas!r}")
    if cpu_replicas > 1 and num_workers > 1:
        raise ValueError(
            "Invalid value for `--cpu-replicas`: more than one virtual CPU "
            "replica is only possible with -n 1 (one process running "
            "MirroredStrategy over K virtual CPUs); multi-worker training uses "
            "one CPU device per worker. Received: "
            f"--cpu-replicas={cpu_replicas} with -n {num_workers}. Use -n "
            f"{num_workers} --cpu-replicas 1 or -n 1 --cpu-replicas "
            f"{cpu_replicas}.")


def port_in_use(port: int) -> bool:
    """True if `port` cannot be bound on all interfaces (as TF's server does)."""
    return _bind_error(port) is not None


def _bind_error(port: int) -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("", port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                return "is already in use on this host"
            if e.errno == errno.EACCES:
                return ("cannot be bound on this host (permission denied: "
                        "ports below 1024 need privileges)")
            raise
    return None


def check_ports_free(tasks: Sequence[tuple[str, int]]) -> None:
    """Pre-flight: raises PortInUseError naming the first taken (task, port).

    Args:
        tasks: sequence of (task name, port), e.g. `[("worker 0", 2222)]`.
    """
    for task, port in tasks:
        problem = _bind_error(port)
        if problem:
            raise PortInUseError(
                f"Port {port} for {task} {problem}: TensorFlow could not start "
                "that task's server. Stop the process holding it (`ss -ltnp | "
                f"grep :{port}`) or choose other ports. Received: {task} "
                f"port={port}")


def check_own_port(cfg: Mapping, hostnames: Sequence[str] | None = None) -> None:
    """Pre-flight for one process: is this task's own port free here?

    Looks up this task's address in a validated TF_CONFIG; when its host is
    this machine (loopback, or `socket.gethostname()` / FQDN, or one of
    `hostnames`), raises `PortInUseError` naming the task and port if
    something already listens there. Call it before creating the strategy.
    """
    task = cfg["task"]
    address = cfg["cluster"][task["type"]][task["index"]]
    host, port = tf_config_lib.split_address(address)
    if _is_this_host(host, hostnames):
        check_ports_free([(f"{task['type']} {task['index']} ({address})",
                           int(port))])


def _is_this_host(host: str, hostnames: Sequence[str] | None = None) -> bool:
    if tf_config_lib.is_loopback_host(host):
        return True
    names = set(hostnames or ())
    if hostnames is None:
        try:
            names = {socket.gethostname(), socket.getfqdn()}
        except OSError:
            return False
    short = {n.split(".", 1)[0].lower() for n in names}
    return host.lower() in {n.lower() for n in names} or (
        host.split(".", 1)[0].lower() in short)


def local_cluster(num_workers: int, base_port: int | None = None
                  ) -> list[str]:
    """Loopback worker addresses: free ports, or base_port, base_port+1, ..."""
    ports = None if base_port is None else [base_port + i for i in range(num_workers)]
    return sources.local_addresses(num_workers, "localhost", ports)


def worker_env(base_env: Mapping[str, str], index: int, addresses: Sequence[str],
               restart_count: int = 0, cpu_replicas: int | None = None
               ) -> dict[str, str]:
    """Pure: the environment of local worker `index` (TF_CONFIG if N > 1)."""
    env = dict(base_env)
    n = len(addresses)
    cfg = (tf_config_lib.build_tf_config({"worker": list(addresses)}, "worker", index)
           if n > 1 else None)
    tf_config_lib.apply_tf_config(cfg, env)
    env[RESTART_COUNT_ENV] = str(restart_count)
    env[WORKER_INDEX_ENV] = str(index)
    env[NUM_WORKERS_ENV] = str(n)
    env.setdefault("PYTHONUNBUFFERED", "1")
    if cpu_replicas is not None:
        env[CPU_REPLICAS_ENV] = str(cpu_replicas)
    return env


def ps_task_envs(base_env: Mapping[str, str], num_workers: int, num_ps: int,
                 addresses: Sequence[str], restart_count: int = 0
                 ) -> tuple[list[dict[str, str]], list[str]]:
    """Pure: environments and labels of a local parameter-server cluster.

    `addresses` holds 1 + num_workers + num_ps addresses: the chief, the
    workers, then the ps tasks, started in that order.
    """
    cluster = {"chief": list(addresses[:1]),
               "worker": list(addresses[1:1 + num_workers]),
               "ps": list(addresses[1 + num_workers:])}
    envs, labels = [], []
    for task_type, task_index in tf_config_lib.all_tasks(cluster):
        env = dict(base_env)
        tf_config_lib.apply_tf_config(
            tf_config_lib.build_tf_config(cluster, task_type, task_index), env)
        env[RESTART_COUNT_ENV] = str(restart_count)
        env.setdefault("PYTHONUNBUFFERED", "1")
        envs.append(env)
        labels.append(f"{task_type} {task_index}")
    return envs, labels


# ------------------------------------------------------------ the group
def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _describe_code(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name} (exit code {128 - returncode})"
    return f"exited with code {returncode}"


def _deathsig_preexec():
    """Linux: make the child die (SIGKILL) when the launcher thread dies."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes  # pylint: disable=g-import-not-at-top

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig, sigkill = 1, int(signal.SIGKILL)

    def preexec():
        prctl(pr_set_pdeathsig, sigkill)

    return preexec


class _Group:
    """One attempt: N processes, their output pumps, and their teardown."""

    def __init__(self, argv, envs, cwd, out, err, lock, labels=None):
        labels = labels or [f"worker {i}" for i in range(len(envs))]
        self.procs: list[subprocess.Popen] = []
        self.pumps: list[threading.Thread] = []
        preexec = _deathsig_preexec()
        try:
            for i, env in enumerate(envs):
                p = subprocess.Popen(
                    list(argv), env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    start_new_session=True, preexec_fn=preexec)
                self.procs.append(p)
                for pipe, stream in ((p.stdout, out), (p.stderr, err)):
                    t = threading.Thread(target=_pump, daemon=True,
                                         args=(pipe, stream, f"[{labels[i]}] ", lock))
                    t.start()
                    self.pumps.append(t)
        except BaseException:
            self.kill()
            raise

    def signal_all(self, signum: int) -> None:
        for p in self.procs:
            _killpg(p, signum)

    def terminate(self, timeout_s: float, signum: int | None = signal.SIGTERM
                  ) -> None:
        """Sends `signum` (None: already sent) to every live worker group,
        waits up to timeout_s for them to exit, then SIGKILLs them all."""
        live = [p for p in self.procs if p.poll() is None]
        for p in live:
            if signum is not None:
                _killpg(p, signum)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and any(p.poll() is None for p in live):
            time.sleep(_POLL_S)
        self.kill()

    def kill(self) -> None:
        """SIGKILL every group (leaders and anything they started), reap."""
        for p in self.procs:
            _killpg(p, signal.SIGKILL)
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for t in self.pumps:
            t.join(timeout=2)


def _killpg(p: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(p.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _pump(pipe: IO[bytes], stream: IO[str], prefix: str,
          lock: threading.Lock) -> None:
    try:
        for raw in iter(pipe.readline, b""):
            line = raw.decode("utf-8", errors="replace")
            if not line.endswith("\n"):
                line += "\n"
            with lock:
                try:
                    stream.write(prefix + line)
                    stream.flush()
                except (ValueError, OSError):  # closed stream: keep draining
                    pass
    finally:
        pipe.close()


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


# ------------------------------------------------------------ run_local
def run_local(argv: Sequence[str], num_workers: int, *,
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
              num_ps: int = 0) -> LaunchResult:
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
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) \
            or num_workers < 1:
        raise ValueError("Invalid value for `-n`: expected a positive int. "
                         f"Received: -n {num_workers!r}")
    if isinstance(max_restarts, bool) or not isinstance(max_restarts, int) \
            or max_restarts < 0:
        raise ValueError("Invalid value for `--max-restarts`: expected an int "
                         f">= 0. Received: --max-restarts={max_restarts!r}")
    if not argv:
        raise ValueError("Nothing to launch: expected a command after `--`. "
                         "Received: an empty command")
    check_cpu_replicas(num_workers, cpu_replicas)
    out = stdout if stdout is not None else sys.stdout
    err = stderr if stderr is not None else sys.stderr
    base_env = dict(os.environ if env is None else env)
    lock = threading.Lock()
    launcher = _Launcher(out, err, lock)
    old_handlers = launcher.install_signal_handlers() if handle_signals else {}
    try:
        restarts = 0
        while True:
            labels = None
            if num_ps:
                addresses = local_cluster(1 + num_workers + num_ps, base_port)
                ports = [int(tf_config_lib.split_address(a)[1]) for a in addresses]
                envs, labels = ps_task_envs(base_env, num_workers, num_ps,
                                            addresses, restarts)
                check_ports_free(list(zip(labels, ports)))
                where = f"(chief, workers, ps) on {', '.join(addresses)}"
            elif num_workers > 1:
                addresses = local_cluster(num_workers, base_port)
                ports = [int(tf_config_lib.split_address(a)[1]) for a in addresses]
                check_ports_free([(f"worker {i}", p) for i, p in enumerate(ports)])
                where = f"on {', '.join(addresses)}"
            else:  # one process: no cluster, no TF_CONFIG, no port
                addresses, ports, where = ["localhost:0"], [], "without TF_CONFIG"
            if not num_ps:
                envs = [worker_env(base_env, i, addresses, restarts, cpu_replicas)
                        for i in range(num_workers)]
            what = f"{len(envs)} task(s)" if num_ps else f"{num_workers} worker(s)"
            launcher.log(f"starting {what} {where} (attempt "
                         f"{restarts + 1} of {max_restarts + 1}): {shlex.join(argv)}")
            result = launcher.run_attempt(argv, envs, ports, startup_timeout,
                                          term_timeout, cwd, labels)
            result.restarts = restarts
            if (result.returncode == 0 or launcher.stop_signal is not None
                    or restarts >= max_restarts):
                launcher.log(result.message)
                return result
            restarts += 1
            launcher.log(f"{result.message}; restarting the group "
                         f"(restart {restarts} of {max_restarts})")
    finally:
        for signum, handler in old_handlers.items():
            signal.signal(signum, handler)


class _Launcher:
    """State shared across attempts: output, lock, the signal we got."""

    def __init__(self, out, err, lock):
        self.out, self.err, self.lock = out, err, lock
        self.stop_signal: int | None = None
        self.group: _Group | None = None

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

    def run_attempt(self, argv, envs, ports, startup_timeout, term_timeout,
                    cwd, labels=None) -> LaunchResult:
        n = len(envs)
        labels = labels or [f"worker {i}" for i in range(n)]
        self.group = group = _Group(argv, envs, cwd, self.out, self.err, self.lock,
                                    labels)
        try:
            if self.stop_signal is not None:  # arrived while spawning
                group.signal_all(self.stop_signal)
            start = time.monotonic()
            joined = [False] * len(ports)
            next_join_poll = start
            while True:
                codes = [p.poll() for p in group.procs]
                if self.stop_signal is not None:  # already forwarded
                    group.terminate(term_timeout, signum=None)
                    name = signal.Signals(self.stop_signal).name
                    return LaunchResult(
                        128 + self.stop_signal,
                        message=f"got {name}; stopped {n} worker(s)")
                failed = [i for i, c in enumerate(codes) if c not in (None, 0)]
                if failed:
                    i = failed[0]
                    code = codes[i]
                    group.terminate(term_timeout)
                    return LaunchResult(
                        _exit_code(code), failed_worker=i,
                        message=f"{labels[i]} {_describe_code(code)}; "
                                f"stopped the other {n - 1} worker(s)")
                if all(c == 0 for c in codes):
                    group.kill()  # reap anything left in their groups
                    return LaunchResult(0, message=f"all {n} worker(s) finished")
                now = time.monotonic()
                if ports and not all(joined) and now >= next_join_poll:
                    for i, port in enumerate(ports):
                        if not joined[i] and (codes[i] == 0 or _accepts(port)):
                            joined[i] = True
                    next_join_poll = now + _JOIN_POLL_S
                    if (not all(joined) and startup_timeout
                            and now - start > startup_timeout):
                        late = [i for i, ok in enumerate(joined) if not ok]
                        group.terminate(term_timeout)
                        names = ", ".join(f"{labels[i]} (localhost:{ports[i]})"
                                          for i in late)
                        return LaunchResult(
                            EXIT_LAUNCH_ERROR, failed_worker=late[0],
                            message=f"{names} did not join within "
                                    f"{startup_timeout:g} s (its TF server never "
                                    "listened: is the strategy created early, "
                                    "and does the script start?); stopped all "
                                    "workers")
                time.sleep(_POLL_S)
        finally:
            group.kill()
            self.group = None
