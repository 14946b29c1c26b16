"""The worker side of `tfdist-opt launch --ray`: run the script, pipe its output.

Runs inside each Ray Train worker process (Ray Train's
`train_loop_per_worker` is `worker_loop`): sets the launcher's variables,
pipes file descriptors 1 and 2 (Python and TF's C++ logs) into the
launcher's `ray.util.queue.Queue` as `(rank, fd, line)`, runs the script as
`__main__` (`runpy`, `sys.argv` set) and turns a non-zero exit code into
`WorkerExit`, which fails the attempt (Ray restarts the group while
`FailureConfig(max_failures)` allows; an elastic restart after a lost node
is sized by `tfdist_opt.launch.ray_elastic`). Imports no Ray and no TF at
module level.
"""

from __future__ import annotations

import logging
import os
import re
import runpy
import sys
import threading
import traceback
from typing import Sequence

EXIT_RE = re.compile(r"tfdist-opt worker exit code (\d+)")


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
