"""A process's own Python stack (every thread), and a peer's state from /proc.

`own_stacks()` is what a stuck worker's inspector thread publishes: the
frames of every thread (`sys._current_frames`, the same source
`faulthandler` reads), newest call last, innermost frames kept when long.
A process that is not running (SIGSTOP, a debugger: state `T` / `t`) cannot
report its own stack; `process_state()` reads that from `/proc` when the
peer runs on this host, so the message can say why the stack is missing.

"This host" is decided by `host_identity()`, which each worker publishes:
the kernel's boot id plus the network namespace, not the host name or the
address. Containers and network namespaces on one machine (or several
machines cloned with one host name) share a name but not a process table
view, and a pid read from another host's record in the local `/proc` names
an unrelated process: a peer with another identity gets no `/proc` read.

Pure Python, no TensorFlow.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import traceback

_MAX_FRAMES = 12  # innermost frames kept per thread
_STATES = {
    "R": "running",
    "S": "sleeping",
    "D": "in uninterruptible I/O (D)",
    "T": "stopped (state T: SIGSTOP)",
    "t": "stopped by a debugger (state t)",
    "Z": "a zombie (exited)",
    "X": "dead",
}


def own_stacks(max_frames: int = _MAX_FRAMES, skip_current: bool = True) -> str:
    """Every thread's Python stack, main thread first.

    Args:
        max_frames: int. Innermost frames kept per thread.
        skip_current: bool. Leave out the calling thread (the inspector).

    Returns:
        Text: one `Thread NAME (id):` header per thread, then its frames in
        `traceback` format.
    """
    names = {t.ident: t.name for t in threading.enumerate()}
    me = threading.get_ident()
    main = threading.main_thread().ident
    frames = sys._current_frames()  # pylint: disable=protected-access
    order = sorted(frames, key=lambda ident: (ident != main, names.get(ident, "~")))
    out = []
    for ident in order:
        if skip_current and ident == me:
            continue
        stack = traceback.extract_stack(frames[ident])
        cut = len(stack) - max_frames
        lines = [f"Thread {names.get(ident, '?')} ({ident}), innermost call last:"]
        if cut > 0:
            lines.append(f"  ... {cut} outer frame(s)")
            stack = stack[cut:]
        lines.extend(line.rstrip("\n") for line in traceback.format_list(stack))
        out.append("\n".join(lines))
    return "\n".join(out)


def hostname() -> str:
    return socket.gethostname()


def host_identity() -> str:
    """`boot-id/net:inode`: which kernel and network namespace this process is in.

    Two processes whose identities are equal see one `/proc` for each
    other's pids (same boot of one kernel, same network namespace, so the
    same machine or container). Empty when `/proc` does not tell (not
    Linux): then no peer counts as local.
    """
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        net = os.stat("/proc/self/ns/net").st_ino
    except OSError:
        return ""
    return f"{boot}/net:{net}"


def process_state(pid: int, host_id: str, proc_root: str = "/proc") -> str | None:
    """`stopped (state T: SIGSTOP)` etc. for a process on this host, else None.

    `host_id` is the peer's published `host_identity()`; any other value
    than this process's own (another host, or none published) gives None:
    a pid of another host means nothing here.
    """
    if not pid or not host_id or host_id != host_identity():
        return None
    try:
        with open(f"{proc_root}/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError):
        return "gone (no such process)"
    return _STATES.get(state, f"in state {state}")


def unavailable_reason(
    pid: int, host: str, host_id: str, waited_s: float, address: str = "", proc_root: str = "/proc"
) -> str:
    """Why a worker's stack did not arrive, as precisely as this host can tell.

    Args:
        pid: int. The worker's process id, as it published it.
        host: str. Its host name, as it published it.
        host_id: str. Its `host_identity()`, as it published it.
        waited_s: float. How long the stack was waited for.
        address: str. Its `host:port` in the cluster, if known.
        proc_root: str. Where this host's process table is mounted.
    """
    state = process_state(pid, host_id, proc_root)
    if state is not None and state.startswith("stopped"):
        return (
            f"unavailable: process {pid} is {state}, so it cannot report "
            "its stack or its latest position"
        )
    at = f" at {address}" if address else ""
    if state is None:
        return (
            f"unavailable: none arrived within {waited_s:g} s (process {pid} "
            f"on host {host}{at}, another host: its state cannot be read "
            "from here; the host or its network may be unreachable, or its "
            "Python threads blocked, e.g. by native code holding the GIL)"
        )
    return (
        f"unavailable: none arrived within {waited_s:g} s (process {pid} on "
        f"this host{at}, {state}; its Python threads may be blocked, e.g. "
        "by native code holding the GIL)"
    )
