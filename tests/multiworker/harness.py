"""Real multi-process clusters on 127.0.0.1 for tests.

Every worker gets its own TF_CONFIG on free loopback ports, a wall-clock
timeout, and is killed (with its process group) whatever happens, so no test
leaves a process behind.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np

from tests import warm_python

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclasses.dataclass
class WorkerResult:
    index: int
    returncode: int | None  # None: killed at the timeout
    output: str


def free_ports(n: int) -> list[int]:
    """n distinct free TCP ports on 127.0.0.1 (held open together while chosen)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def worker_env(index: int, ports: list[int], extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env.update(
        {
            "TF_CONFIG": json.dumps(
                {
                    "cluster": {"worker": [f"localhost:{p}" for p in ports]},
                    "task": {"type": "worker", "index": index},
                }
            ),
            "TF_CPP_MIN_LOG_LEVEL": "2",
            "PYTHONPATH": REPO_ROOT + os.pathsep + env.get("PYTHONPATH", ""),
        }
    )
    env.update(extra or {})
    return env


def run_workers(
    n: int,
    argv: list[str],
    timeout_s: float = 240,
    extra_env: dict | None = None,
    only: list[int] | None = None,
    ports: list[int] | None = None,
    warm: bool = True,
) -> list[WorkerResult]:
    """Runs `python argv...` as n workers of one cluster and waits for all.

    `only` starts just those task indices (the others never come, as when a
    host is down). Returns one WorkerResult per started worker; a worker
    still running at the deadline is killed and reported with returncode None.
    `warm` (default) forks the workers from `warm_python`'s zygotes; False
    starts the real interpreter (for a test that signals or inspects the
    process it started).
    """
    ports = ports or free_ports(n)
    indices = list(range(n)) if only is None else list(only)
    procs = []
    try:
        for i in indices:
            procs.append(
                subprocess.Popen(
                    [*python(warm), *argv],
                    env=worker_env(i, ports, extra_env),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    start_new_session=True,
                    cwd=REPO_ROOT,
                )
            )
        deadline = time.monotonic() + timeout_s
        results = []
        for i, p in zip(indices, procs):
            try:
                out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
                results.append(WorkerResult(i, p.returncode, out))
            except subprocess.TimeoutExpired:
                _kill(p)
                out, _ = p.communicate()
                results.append(WorkerResult(i, None, out))
        return results
    finally:
        for p in procs:
            _kill(p)


def report(mode: str, fn) -> None:
    """In a worker script: prints `fn()`'s result as the `RESULT` line `results_by_mode` reads.

    An exception becomes {"error": ..., "trace": ...}, so the other cases
    of the script still run.
    """
    import traceback

    try:
        out = fn()
    except Exception as e:  # pylint: disable=broad-except
        out = {"error": f"{type(e).__name__}: {e}"[:1500], "trace": traceback.format_exc()[-3000:]}
    print("RESULT " + json.dumps({"mode": mode, **out}), flush=True)


def results_by_mode(results) -> list[dict]:
    """Each worker's `RESULT {json}` lines keyed by their "mode" field.

    Asserts every worker exited 0 (its output's tail in the message).
    """
    out = []
    for r in results:
        assert r.returncode == 0, r.output[-3000:]
        lines = [l for l in r.output.splitlines() if l.startswith("RESULT ")]
        out.append({d["mode"]: d for d in (json.loads(l[7:]) for l in lines)})
    return out


def python(warm: bool = True) -> list[str]:
    """The command that starts a test's Python: warm (forked) or the real one."""
    return list(warm_python.PYTHON) if warm else [sys.executable]


def run_single(
    argv: list[str], timeout_s: float = 240, extra_env: dict | None = None, warm: bool = True
) -> WorkerResult:
    """Runs `python argv...` once with no TF_CONFIG (`warm`: see `run_workers`)."""
    env = dict(os.environ)
    env.pop("TF_CONFIG", None)
    env.update(
        {
            "TF_CPP_MIN_LOG_LEVEL": "2",
            "PYTHONPATH": REPO_ROOT + os.pathsep + env.get("PYTHONPATH", ""),
        }
    )
    env.update(extra_env or {})
    p = subprocess.run(
        [*python(warm), *argv],
        env=env,
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout_s,
    )
    return WorkerResult(0, p.returncode, p.stdout)


def run_group(argv: list[str], *, env: dict, cwd, timeout_s: float) -> str:
    """Runs `argv` in a session of its own and returns its output (stderr merged).

    Fails the test unless it exits 0. On a timeout or any error the whole
    process group is killed, so nothing it started is left behind.
    """
    proc = subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=10)
    assert proc.returncode == 0, out[-4000:]
    return out


@contextlib.contextmanager
def alongside(fn, *args, **kwargs):
    """Runs `fn(*args, **kwargs)` in a thread while the block runs.

    Yields its `Future`; leaving the block waits for it (bound it with the
    call's own timeout, e.g. `run_single`'s). For a one-process reference
    beside a cluster or a Ray start. On 2 busy cores it saves little wall
    (test_keras_fit.py alone: 56.8 -> 53.8 s); beside a wait (a Ray head
    starting) it saves the reference's time.
    """
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        yield pool.submit(fn, *args, **kwargs)


def _kill(p: subprocess.Popen) -> None:
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait(timeout=10)


def process_running(pid: int) -> bool:
    """True if `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):  # gone before or while reading
        return False


def wait_gone(pid: int, timeout: float = 5.0) -> bool:
    """True once `pid` no longer runs (absent or a zombie) within `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not process_running(pid):
            return True
        time.sleep(0.05)
    return False


def wait_for_file(path, proc: subprocess.Popen, timeout: float = 120, poll_s: float = 0.05) -> None:
    """Waits for `path` to exist; fails early (with its output) if `proc` ends."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path):
            return
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(
                f"launch ended early ({proc.returncode}):\n"
                f"{(out or '')[-2000:]}\n{(err or '')[-3000:]}"
            )
        time.sleep(poll_s)
    raise AssertionError(f"{path} did not appear within {timeout} s")


def start_launch(
    n: int, options, argv, extra_env: dict | None = None, warm: bool = True
) -> subprocess.Popen:
    """`tfdist-opt launch -n N OPTIONS -- python ARGV...` in its own session.

    Start-up and term timeouts are short (120 s, 2 s) so failures show fast;
    pair with `finish_launch`, which kills the group whatever happens. The
    launcher is the real interpreter; its workers are warm unless `warm` is
    False (see `run_workers`).
    """
    env = dict(
        os.environ,
        TF_CPP_MIN_LOG_LEVEL="2",
        PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    env.pop("TF_CONFIG", None)
    env.update(extra_env or {})
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tfdist_opt",
            "launch",
            "-n",
            str(n),
            "--startup-timeout",
            "120",
            "--term-timeout",
            "2",
            *options,
            "--",
            *python(warm),
            *argv,
        ],
        env=env,
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def finish_launch(proc: subprocess.Popen, timeout: float) -> tuple[str, str]:
    """(stdout, stderr) of a launch; its process group is killed whatever happens."""
    try:
        return proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=10)


def sgd_reference(epochs: int) -> np.ndarray:
    """The weights the saving scripts' Dense(1) reaches (w0, w1, bias).

    From zeros, SGD(0.1) on the mean squared error, global batch 8, over the
    16 examples the scripts use, `epochs` times.
    """
    x = np.arange(32, dtype="float64").reshape(16, 2) / 16.0
    y = x @ np.array([[1.5], [-2.0]]) + 0.25
    w, b = np.zeros((2, 1)), 0.0
    for _ in range(epochs):
        for s in (slice(0, 8), slice(8, 16)):
            err = x[s] @ w + b - y[s]
            w = w - 0.1 * 2 * x[s].T @ err / 8
            b = b - 0.1 * 2 * err.mean()
    return np.concatenate([w.ravel(), [b]])
