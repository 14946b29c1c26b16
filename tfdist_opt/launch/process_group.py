"""One attempt's worker processes: start, stream output, tear down. No TF.

Each worker is started in its own session (so its own process group) with
PR_SET_PDEATHSIG (Linux) and, when the launcher has a watchdog
(`tfdist_opt.coordination.watchdog`), this launch's `TFDIST_LAUNCH_ID` in its
environment and its group registered with the watchdog. `Group.kill()`
SIGKILLs every group and every tagged process, then reaps.
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import IO

from tfdist_opt.coordination import watchdog as watchdog_lib
from tfdist_opt.launch.checks import LaunchError

_POLL_S = 0.05


def exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def describe_code(returncode: int) -> str:
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


class Group:
    """One attempt: N processes, their output pumps, and their teardown."""

    def __init__(self, argv, envs, cwd, out, err, lock, watchdog=None, keep=None, labels=None):
        labels = labels or [f"worker {i}" for i in range(len(envs))]
        self.labels = list(labels)
        self.procs: list[subprocess.Popen] = []
        self.pumps: list[threading.Thread] = []
        self.watchdog = watchdog
        preexec = _deathsig_preexec()
        try:
            for i, env in enumerate(envs):
                if watchdog is not None:
                    env = dict(env, **{watchdog_lib.LAUNCH_ID_ENV: watchdog.launch_id})
                try:
                    p = subprocess.Popen(
                        list(argv),
                        env=env,
                        cwd=cwd,
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                        start_new_session=True,
                        preexec_fn=preexec,
                    )
                except OSError as e:
                    raise LaunchError(
                        f"Cannot start {labels[i]}: {shlex.join(argv)}: "
                        f"{e.strerror or e}. Received: -- {shlex.join(argv)}"
                    ) from e
                self.procs.append(p)
                if watchdog is not None:
                    watchdog.add_group(p.pid)
                for pipe, stream in ((p.stdout, out), (p.stderr, err)):
                    t = threading.Thread(
                        target=_pump,
                        daemon=True,
                        args=(pipe, stream, f"[{labels[i]}] ", lock, keep),
                    )
                    t.start()
                    self.pumps.append(t)
        except BaseException:
            self.kill()
            raise

    def signal_all(self, signum: int) -> None:
        for p in self.procs:
            _killpg(p, signum)

    def terminate(self, timeout_s: float, signum: int | None = signal.SIGTERM) -> list[str]:
        """Sends `signum` (None: already sent) to every live worker group,
        waits up to timeout_s for them to exit, then SIGKILLs them all.

        Returns the labels of the workers still running at the deadline (the
        ones the SIGKILL stopped), so the caller can say so.
        """
        live = [p for p in self.procs if p.poll() is None]
        for p in live:
            if signum is not None:
                _killpg(p, signum)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and any(p.poll() is None for p in live):
            time.sleep(_POLL_S)
        late = [self.labels[i] for i, p in enumerate(self.procs) if p in live and p.poll() is None]
        self.kill()
        return late

    def kill(self) -> None:
        """SIGKILL every group (leaders and anything they started), every
        process tagged with this launch's id (descendants that left the
        group), reap."""
        for p in self.procs:
            _killpg(p, signal.SIGKILL)
        if self.watchdog is not None:
            watchdog_lib.kill_tagged(self.watchdog.launch_id)
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


def _pump(pipe: IO[bytes], stream: IO[str], prefix: str, lock: threading.Lock, keep=None) -> None:
    try:
        for raw in iter(pipe.readline, b""):
            line = raw.decode("utf-8", errors="replace")
            if not line.endswith("\n"):
                line += "\n"
            with lock:
                if keep is not None and not keep(line):
                    continue
                try:
                    stream.write(prefix + line)
                    stream.flush()
                except (ValueError, OSError):  # closed stream: keep draining
                    pass
    finally:
        pipe.close()


def accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False
