"""A process that outlives the launcher and kills what it started.

`PR_SET_PDEATHSIG` reaches only the launcher's direct children: when the
command is shell-wrapped (`sh -c "python w.py; echo"`) or a worker starts
children of its own, a SIGKILLed launcher used to leave those running,
holding ports (and GPUs). So `run_local` starts this watchdog first, in its
own session (a kill of the launcher's process group does not reach it), and
tells it each worker's process group over a pipe. The watchdog blocks on the
pipe; when it reads EOF (the launcher exited, however it died) it

1. SIGKILLs every worker process group it was told about (the shell and
   everything in its group), then
2. SIGKILLs every process whose environment carries this launch's
   `TFDIST_LAUNCH_ID` (inherited by every descendant, so it also finds
   grandchildren that moved to a new session or group with `setsid`),
   repeating until none is left.

The launcher runs the same two steps itself on every normal exit path, so
the watchdog only matters when the launcher is killed. Limits: a descendant
that clears its environment (`env -i`) and leaves the worker's process group
escapes step 2; other users' processes are never touched. Linux (`/proc`)
only for step 2.

Pure Python, imports nothing from TensorFlow; run as
`bare_python("watchdog", "main", LAUNCH_ID)`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

LAUNCH_ID_ENV = "TFDIST_LAUNCH_ID"
_SCAN_ROUNDS = 20
_SCAN_PAUSE_S = 0.05


# What `bare_python` runs: the packages as bare namespaces, so importing one
# `tfdist_opt.coordination` module runs no package's `__init__`.
_BARE = (
    "import sys, types\n"
    "for name, path in {packages!r}:\n"
    "    m = types.ModuleType(name); m.__path__ = [path]; sys.modules[name] = m\n"
    "from tfdist_opt.coordination import {module} as m\n"
    "sys.exit(m.{function}())\n"
)


def bare_python(module: str, function: str, *args: str) -> list[str]:
    """The command running `tfdist_opt.coordination.<module>.<function>()` in a small Python.

    A watchdog runs with each launch and each worker's start-up, and needs
    the standard library only: without `site` and without the package's
    `__init__` (numpy, package metadata) it starts in a fraction of the CPU
    time of a full interpreter. `module` must import nothing outside
    `tfdist_opt.coordination`, `tfdist_opt.cluster` and the standard library.
    """
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    packages = (
        ("tfdist_opt", root),
        ("tfdist_opt.cluster", os.path.join(root, "cluster")),
        ("tfdist_opt.coordination", here),
    )
    code = _BARE.format(packages=packages, module=module, function=function)
    return [sys.executable, "-S", "-c", code, *args]


def new_launch_id() -> str:
    return uuid.uuid4().hex


def tagged_pids(launch_id: str, proc_root: str = "/proc") -> list[int]:
    """Pids (not this process, not zombies) whose environ has this launch's id."""
    needle = f"{LAUNCH_ID_ENV}={launch_id}".encode()
    found = []
    try:
        entries = os.listdir(proc_root)
    except OSError:
        return []
    me = os.getpid()
    for entry in entries:
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(os.path.join(proc_root, entry, "environ"), "rb") as f:
                env = f.read()
            with open(os.path.join(proc_root, entry, "stat"), "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:  # gone, or another user's
            continue
        if state != b"Z" and needle in env.split(b"\0"):
            found.append(int(entry))
    return found


def kill_groups(pgids) -> None:
    for pgid in pgids:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def kill_tagged(launch_id: str) -> int:
    """SIGKILLs every tagged process (and its group) until none is left."""
    killed = 0
    for _ in range(_SCAN_ROUNDS):
        pids = tagged_pids(launch_id)
        if not pids:
            break
        for pid in pids:
            for kill in (os.kill, os.killpg):
                try:
                    kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        killed += len(pids)
        time.sleep(_SCAN_PAUSE_S)
    return killed


def main(argv=None) -> int:
    """Reads `pg <pgid>` lines from stdin; on EOF kills groups, then tagged pids."""
    argv = sys.argv[1:] if argv is None else argv
    launch_id = argv[0]
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the launcher decides
    pgids = set()
    for line in sys.stdin:
        kind, _, value = line.strip().partition(" ")
        if kind == "pg" and value.isdigit():
            pgids.add(int(value))
    kill_groups(pgids)
    kill_tagged(launch_id)
    return 0


class Watchdog:
    """The launcher's handle: start it, tell it groups, close it at the end."""

    def __init__(self, launch_id: str):
        self.launch_id = launch_id
        env = {k: v for k, v in os.environ.items() if k != LAUNCH_ID_ENV}
        self.proc = subprocess.Popen(
            bare_python("watchdog", "main", launch_id),
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
            text=True,
        )

    def add_group(self, pgid: int) -> None:
        try:
            self.proc.stdin.write(f"pg {pgid}\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError, OSError):
            pass

    def close(self, timeout_s: float = 10.0) -> None:
        try:
            self.proc.stdin.close()
        except (BrokenPipeError, OSError):
            pass
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
