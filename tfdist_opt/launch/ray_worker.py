"""The worker side of `tfdist-opt launch --ray`: run the script, pipe its output.

Runs inside each Ray Train worker process (Ray Train's
`train_loop_per_worker` is `worker_loop`): sets the launcher's variables,
pipes file descriptors 1 and 2 (Python and TF's C++ logs) into the
launcher's `ray.util.queue.Queue` as `(rank, fd, line)`, runs the script as
`__main__` (`runpy`, `sys.argv` set) and turns a non-zero exit code into
`WorkerExit`, which fails the attempt (Ray restarts the group while
`FailureConfig(max_failures)` allows; an elastic restart after a lost node
is sized by `tfdist_opt.launch.ray_elastic`). `python_target` reads the
command into what the worker runs; `exit_code` reads a failed attempt's
exit code back from Ray's error, in the launcher. Imports no Ray and no TF
at module level.
"""

from __future__ import annotations

import logging
import os
import re
import runpy
import shlex
import sys
import threading
import traceback
from typing import Sequence

from tfdist_opt.launch.contract import EXIT_LAUNCH_ERROR

EXIT_RE = re.compile(r"tfdist-opt worker exit code (\d+)")


def python_target(argv: Sequence[str]) -> tuple[str, str, list[str]]:
    """`python script.py args` → ("path", script, sys.argv); `-m` → ("module", ...).

    Raises:
        ValueError: the command is not a Python script or module.
    """
    argv = list(argv)
    exe = os.path.basename(argv[0]) if argv else ""
    if not re.fullmatch(r"python[0-9.]*", exe) and (
        not argv or os.path.realpath(argv[0]) != os.path.realpath(sys.executable)
    ):
        raise ValueError(
            "Invalid command for `--ray`: workers run a Python script inside "
            "Ray's worker process. Received: "
            + shlex.join(argv)
            + ". Expected `python SCRIPT.py ARGS...` or `python -m MODULE ARGS...`."
        )
    rest = argv[1:]
    if rest[:1] == ["-m"] and len(rest) > 1:
        return "module", rest[1], [rest[1], *rest[2:]]
    if not rest or rest[0].startswith("-"):
        raise ValueError(
            "Invalid command for `--ray`: expected a script or `-m MODULE` after "
            f"python. Received: {shlex.join(argv)}"
        )
    return "path", rest[0], list(rest)


def exit_code(error) -> tuple[int, int | None, str]:
    """(exit code, failed worker, message) from Ray's training error."""
    failures = getattr(error, "worker_failures", None) or {}
    for rank, exc in sorted(failures.items()):
        m = EXIT_RE.search(str(exc))
        if m:
            return int(m.group(1)), rank, f"worker {rank} exited with code {m.group(1)}"
    if failures:
        rank, exc = sorted(failures.items())[0]
        first = str(exc).strip().splitlines()
        return (
            EXIT_LAUNCH_ERROR,
            rank,
            f"worker {rank} failed: {first[-1] if first else type(exc).__name__}",
        )
    text = str(error).strip().splitlines()
    return EXIT_LAUNCH_ERROR, None, text[-1] if text else type(error).__name__


class WorkerExit(RuntimeError):
    """A Ray worker's script ended with a non-zero exit code."""

    def __init__(self, code: int, index: int):
        super().__init__(f"worker {index}: tfdist-opt worker exit code {code}")
        self.code, self.index = code, index

    def __reduce__(self):
        return (WorkerExit, (self.code, self.index))


def run_target(kind: str, target: str, args: Sequence[str]) -> int:
    """Runs a script / module as `__main__` in this process; its exit code."""
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = list(args)
    try:
        if kind == "module":
            sys.path.insert(0, os.getcwd())
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
            runpy.run_path(target, run_name="__main__")
        return 0
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return int(e.code or 0)
        print(e.code, file=sys.stderr)
        return 1
    except BaseException:  # pylint: disable=broad-except
        traceback.print_exc()
        return 1
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


class _ForwardFds:
    """Pipes fds 1 and 2 of this process into `queue` as (index, fd, line)."""

    def __init__(self, queue, index: int):
        self.queue, self.index = queue, index
        self.saved, self.threads = [], []

    def __enter__(self):
        sys.stdout.flush()
        sys.stderr.flush()
        for fd in (1, 2):
            r, w = os.pipe()
            self.saved.append(os.dup(fd))
            os.dup2(w, fd)
            os.close(w)
            t = threading.Thread(target=self._pump, args=(r, fd), daemon=True)
            t.start()
            self.threads.append(t)
        return self

    def _pump(self, r, fd):
        buf = b""
        with os.fdopen(r, "rb", buffering=0) as pipe:
            while True:
                chunk = pipe.read(65536)
                if chunk:
                    buf += chunk
                lines = buf.split(b"\n")
                buf = lines.pop() if chunk else b""
                if not chunk and lines and lines[-1] == b"":
                    lines.pop()
                if lines:
                    try:
                        self.queue.put_nowait_batch(
                            [(self.index, fd, ln.decode(errors="replace")) for ln in lines]
                        )
                    except Exception:  # pylint: disable=broad-except
                        pass  # the launcher is gone; drop the output
                if not chunk:
                    return

    def __exit__(self, *exc):
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        for fd, saved in zip((1, 2), self.saved):
            os.dup2(saved, fd)  # closes the pipe's write end: EOF
            os.close(saved)
        for t in self.threads:
            t.join(timeout=10)
        return False


def worker_loop(config: dict) -> None:
    """Ray Train's `train_loop_per_worker`: runs the command here."""
    index = int(os.environ.get("TFDIST_LAUNCH_WORKER_INDEX", "0"))
    os.environ.update(config["env"])
    if config["cwd"] and os.path.isdir(config["cwd"]):
        os.chdir(config["cwd"])
    if config.get("quiet"):
        # Ray's root logger is at INFO in its workers; TF's INFO records are
        # not shown under the local launcher either, and Ray Train's own
        # per-report INFO lines would drown the script's output.
        for name in ("tensorflow", "ray.train"):
            if logging.getLogger(name).level == logging.NOTSET:
                logging.getLogger(name).setLevel(logging.WARNING)
    with _ForwardFds(config["logs"], index):
        code = run_target(config["kind"], config["target"], config["args"])
    if code:
        raise WorkerExit(code, index)
