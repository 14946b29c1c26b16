"""A warm Python for test subprocesses: TensorFlow imported once, forked many times.

Most multi-process tests start `python script.py` two or three times per
scenario, and each start imports TensorFlow and Keras anew (~3 CPU-seconds
here, about 40% of the suite's CPU). Test code that starts such processes
uses `PYTHON` (this file's client) instead of `sys.executable`:

    subprocess.Popen([*warm_python.PYTHON, "script.py", ...], env=env)

The client asks this test session's manager (`tests/warm_manager.py`, a
thread in the pytest process that runs no test: pytest-xdist's controller,
whose workers share it, or the one process under `-n 0`) for a zygote: a
process that imported `tensorflow` (and with it Keras) with the same
import-time environment and then waits. The zygote forks; the
child takes the client's file descriptors, working directory, umask, ignored
signals, environment and argv, and runs the script as `__main__`, as
`python script.py` / `-m module` / `-c code` would. The client forwards every
catchable signal to the child and exits with the child's status (a signal
death is re-raised on itself); when the client dies (SIGKILL included) the
zygote SIGKILLs the child, and a child dies with its zygote
(PR_SET_PDEATHSIG).

A child's `sys.executable` is `bin/python` in the manager's directory, a
script that runs this client again (`nested`): what the child itself starts
with `sys.executable script.py` or `-m module` (a benchmark's peer clusters,
a launcher's workers) forks warm too; `-c` code runs the real interpreter
(the launcher's small watchdogs, which import no TensorFlow).

What stays different from a fresh interpreter (the reasons some tests keep
`sys.executable`): the child's pid is not the client's (SIGSTOP or /proc
reads aimed at the launcher's child reach the client), its parent is the
zygote, /proc/PID/environ shows the zygote's environment (the launcher's
`TFDIST_LAUNCH_ID` sweep finds the client, not the child), and children of
one zygote share its hash seed (so a job's workers never share a zygote: the
TF_CONFIG task is part of the zygote's key).

Import-time state is kept exact by keying zygotes on every environment
variable that TensorFlow, Keras, numpy, Python or their libraries may read
while importing (`_import_env`); the rest (TF_CONFIG, TFDIST_OPT_*, a test's
own variables) is applied in the child before the script's first line.
Anything the client cannot serve (other interpreter options, no manager)
runs the real interpreter: `os.execv(sys.executable, ...)`. One deliberate
difference: a child runs with Grappler off unless its environment has
`TFDIST_TEST_GRAPPLER=1` (`GRAPPLER_ENV`; tests/conftest.py says why).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys

MANAGER_ENV = "TFDIST_TEST_WARM_MANAGER"
GRAPPLER_ENV = "TFDIST_TEST_GRAPPLER"
HERE = os.path.abspath(__file__)
_REAL = sys.executable  # a child's own is the nested client (`_become`)
# The interpreter options keep the client's own start-up at ~20 ms.
PYTHON = [sys.executable, "-I", "-S", HERE, "client"]

# Read (or possibly read) while TensorFlow, Keras and their dependencies
# import: a zygote serves only clients whose values match its own.
_IMPORT_PREFIXES = (
    "TF_",
    "KERAS_",
    "XLA_",
    "LD_",
    "PYTHON",
    "OMP_",
    "MKL_",
    "KMP_",
    "OPENBLAS_",
    "GOTO",
    "NPY_",
    "NUMPY_",
    "MALLOC_",
    "JEMALLOC",
    "TCMALLOC",
    "CUDA_",
    "NVIDIA_",
    "GRPC_",
    "ABSL",
    "PROTOCOL_BUFFERS_",
    "MPL",
    "MATPLOTLIB",
    "HDF5_",
    "XDG_",
    "LC_",
    "TZ",
)
_IMPORT_NAMES = {"HOME", "LANG", "LANGUAGE", "PATH"}
# Applied in the child (they are read later, or the child redoes their effect).
# The temp dir: the child clears `tempfile.tempdir` (TensorFlow's import fills
# it, through absltest's default --test_tmpdir, the one import-time reader
# found) and TensorFlow's C++ reads TMPDIR when it makes a temp file. Keyed,
# the tests that give each worker its own TMPDIR started 24 zygotes a run.
_LATE_NAMES = {"TF_CONFIG", "PYTHONPATH", "PYTHONUNBUFFERED", "TMPDIR", "TEMP", "TMP"}
_FORWARDED = [
    s
    for s in (
        signal.SIGTERM,
        signal.SIGINT,
        signal.SIGHUP,
        signal.SIGQUIT,
        signal.SIGUSR1,
        signal.SIGUSR2,
        signal.SIGALRM,
        signal.SIGCONT,
        signal.SIGWINCH,
        signal.SIGTSTP,
        signal.SIGTTIN,
        signal.SIGTTOU,
    )
]


def _import_env(env: dict) -> dict:
    return {
        k: v
        for k, v in env.items()
        if k not in _LATE_NAMES and (k in _IMPORT_NAMES or k.startswith(_IMPORT_PREFIXES))
    }


def _task_slot(env: dict) -> str:
    """One zygote per TF_CONFIG task, so a job's workers get distinct hash seeds."""
    try:
        task = json.loads(env.get("TF_CONFIG", "") or "{}").get("task", {})
        return f"{task.get('type', '')}:{task.get('index', '')}"
    except (ValueError, AttributeError):
        return "?"


def nested_python(manager: str) -> str:
    """The `python` that a child's `sys.executable` names, for the manager at `manager`."""
    return os.path.join(os.path.dirname(manager), "bin", "python")


def write_nested_python(manager: str) -> None:
    """Writes `nested_python(manager)`: a script that runs this client as `nested`."""
    import shlex

    path = nested_python(manager)
    os.makedirs(os.path.dirname(path))
    with open(path, "w") as f:
        f.write(
            f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -I -S {shlex.quote(HERE)} nested "$@"\n'
        )
    os.chmod(path, 0o755)


def recv_line(sock: socket.socket) -> str:
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = sock.recv(4096)
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf.decode()


# ---------------------------------------------------------------- client


def _parse(argv: list[str]):
    """('path'|'module'|'code', target, sys.argv) or None (not servable)."""
    if not argv:
        return None
    if argv[0] == "-m" and len(argv) >= 2:
        return "module", argv[1], [argv[1], *argv[2:]]
    if argv[0] == "-c" and len(argv) >= 2:
        return "code", argv[1], ["-c", *argv[2:]]
    if argv[0].startswith("-"):
        return None
    return "path", argv[0], list(argv)


def _exec_real(argv: list[str]) -> None:
    os.execv(sys.executable, [sys.executable, *argv])


def client(argv: list[str], nested: bool = False) -> None:
    how = _parse(argv)
    manager = os.environ.get(MANAGER_ENV)
    if how is None or not manager or (nested and how[0] == "code"):
        _exec_real(argv)
    env = dict(os.environ)
    try:
        with socket.socket(socket.AF_UNIX) as m:
            m.connect(manager)
            m.sendall(
                (json.dumps({"env": _import_env(env), "slot": _task_slot(env)}) + "\n").encode()
            )
            path = json.loads(recv_line(m))["path"]
        sock = socket.socket(socket.AF_UNIX)
        sock.connect(path)
    except (OSError, ValueError, KeyError, ConnectionError):
        _exec_real(argv)
    ignored = [int(s) for s in _FORWARDED if signal.getsignal(s) == signal.SIG_IGN]
    fds = [fd for fd in _open_fds() if fd != sock.fileno()]
    request = {
        "how": how[0],
        "target": how[1],
        "argv": how[2],
        "env": env,
        "cwd": os.getcwd(),
        "umask": _umask(),
        "fds": fds,
        "ignored": ignored,
    }
    socket.send_fds(sock, [(json.dumps(request) + "\n").encode()], fds)
    try:
        pid = int(recv_line(sock))
    except (ConnectionError, ValueError):
        _exec_real(argv)  # the zygote died before forking: nothing ran

    def forward(signum, _frame):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for s in _FORWARDED:
        if s not in ignored:
            signal.signal(s, forward)
    try:
        code = int(recv_line(sock))
    except (ConnectionError, ValueError):
        sys.stderr.write("warm_python: the zygote died; the child is gone\n")
        os._exit(1)
    if code < 0:  # die of the same signal (SIGKILL's disposition is fixed)
        if -code not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        os._exit(128 - code)
    os._exit(code)


def _open_fds() -> list[int]:
    fds = []
    for name in os.listdir("/proc/self/fd"):
        try:
            os.fstat(int(name))  # the listing's own descriptor is gone by now
            fds.append(int(name))
        except OSError:
            pass
    return sorted(fds)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# ---------------------------------------------------------------- zygote


def serve(path: str, owner: int, idle_s: float) -> dict:
    """The zygote's loop. Returns only in a forked child: its request."""
    import gc
    import selectors
    import time

    import numpy as np

    # TensorFlow imports Keras 3 itself (tf_keras instead under
    # TF_USE_LEGACY_KERAS=1, part of the key): what a fresh process loads.
    import tensorflow  # noqa: F401

    # The package itself (pure Python: it reads no environment and patches
    # nothing at import; ~0.15 CPU-s a child). Its TensorFlow-backed modules
    # are not: they wire Keras, and a plain-Keras reference must not see it.
    # From this checkout (the parent of tests/), the tree under test: the
    # zygote runs without PYTHONPATH (a child applies it after the fork), so
    # a plain import found the installed copy, and an editable install of
    # another checkout then served every child its `tfdist_opt`.
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(HERE))))
    try:
        import tfdist_opt  # noqa: F401
    finally:
        del sys.path[0]

    # What the import built is never collected in a child: a collection there
    # would write to every object's header and copy the zygote's heap.
    gc.collect()
    gc.freeze()
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path + ".tmp")
    listener.listen(64)
    os.rename(path + ".tmp", path)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    children: dict[int, socket.socket] = {}  # pid -> its client's connection
    idle_since = time.monotonic()
    while True:
        for key, _ in sel.select(timeout=0.2):
            if key.fileobj is listener:
                conn, _ = listener.accept()
                msg, fds, _, _ = socket.recv_fds(conn, 1 << 20, 256)
                while not msg.endswith(b"\n"):
                    more = conn.recv(1 << 20)
                    if not more:
                        break
                    msg += more
                request = json.loads(msg)
                sys.stdout.flush()
                sys.stderr.flush()
                gc.freeze()
                pid = os.fork()
                if pid == 0:
                    sel.close()
                    listener.close()
                    for other in children.values():
                        other.close()
                    return _become(request, fds, conn, np)
                for fd in fds:
                    os.close(fd)
                conn.sendall(f"{pid}\n".encode())
                children[pid] = conn
                sel.register(conn, selectors.EVENT_READ, pid)
            else:  # a client's connection: readable only at its EOF
                try:
                    data = key.fileobj.recv(64)
                except OSError:
                    data = b""
                if not data:
                    try:
                        os.kill(key.data, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    sel.unregister(key.fileobj)
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = children.pop(pid, None)
            if conn is not None:
                try:
                    sel.unregister(conn)
                except (KeyError, ValueError):
                    pass
                try:
                    conn.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
                except OSError:
                    pass
                conn.close()
        if children:
            idle_since = time.monotonic()
        elif time.monotonic() - idle_since > idle_s or not _alive(owner):
            os.unlink(path)
            os._exit(0)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def _become(request: dict, fds: list[int], conn: socket.socket, np) -> dict:
    """In the forked child: take the client's process state."""
    import ctypes
    import fcntl
    import io
    import random
    import tempfile

    os.setsid()
    ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the zygote
    conn.close()
    high = [fcntl.fcntl(got, fcntl.F_DUPFD_CLOEXEC, 1000) for got in fds]
    for fd in _open_fds():
        if fd > 2 and fd not in high:
            os.close(fd)
    for want, fd in zip(request["fds"], high):
        os.dup2(fd, want)  # inheritable, as the client's were
        os.close(fd)
    for s in request["ignored"]:
        signal.signal(s, signal.SIG_IGN)
    os.umask(request["umask"])
    os.chdir(request["cwd"])
    env = request["env"]
    os.environ.clear()
    os.environ.update(env)
    base = sys.path[1:]  # the zygote ran without PYTHONPATH
    first = {
        "path": lambda: os.path.dirname(os.path.realpath(request["target"])),
        "module": os.getcwd,
        "code": lambda: "",
    }[request["how"]]()
    sys.path[:] = [first, *_pythonpath(env.get("PYTHONPATH", "")), *base]
    sys.argv[:] = request["argv"]
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))
    enc, errors = sys.stdout.encoding, sys.stdout.errors

    def stream(fd, mode, line, err=None):
        raw = io.FileIO(fd, mode, closefd=False)
        if mode == "r":
            return io.TextIOWrapper(io.BufferedReader(raw), encoding=enc, errors=errors)
        buffered = raw if unbuffered else io.BufferedWriter(raw)
        return io.TextIOWrapper(
            buffered,
            encoding=enc,
            errors=err or errors,
            line_buffering=line or os.isatty(fd),
            write_through=unbuffered,
        )

    sys.stdin = sys.__stdin__ = stream(0, "r", False)
    sys.stdout = sys.__stdout__ = stream(1, "w", False)
    sys.stderr = sys.__stderr__ = stream(2, "w", True, "backslashreplace")
    tempfile.tempdir = None
    if env.get(MANAGER_ENV) and os.path.exists(nested_python(env[MANAGER_ENV])):
        # the child's own `sys.executable` children: warm too
        sys.executable = nested_python(env[MANAGER_ENV])
    random.seed()
    np.random.seed()
    sys.modules["tensorflow"].config.optimizer.set_experimental_options(
        {"disable_meta_optimizer": env.get(GRAPPLER_ENV) != "1"}
    )
    return request


def _pythonpath(value: str) -> list[str]:
    return [os.path.abspath(p) for p in value.split(os.pathsep) if p]


def run(request: dict) -> None:
    """Runs the request's program as `__main__`, as the interpreter would."""
    import runpy
    import types

    how, target = request["how"], request["target"]
    if how == "module":
        runpy._run_module_as_main(target, alter_argv=True)  # noqa: SLF001 - as `-m`
        return
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = __builtins__
    if how == "path":
        main.__file__ = os.path.abspath(target)  # absolute, as since Python 3.9
        try:
            with open(target, "rb") as f:
                source = f.read()
        except OSError as e:  # the interpreter's own message and status
            sys.stderr.write(
                f"{_REAL}: can't open file {main.__file__!r}: [Errno {e.errno}] {e.strerror}\n"
            )
            sys.exit(2)
        code = compile(source, main.__file__, "exec")
    else:
        code = compile(target, "<string>", "exec")
    sys.modules["__main__"] = main
    exec(code, main.__dict__)  # noqa: S102 - the test's own script


def main() -> None:
    if sys.argv[1] == "client":
        client(sys.argv[2:])
    elif sys.argv[1] == "nested":
        client(sys.argv[2:], nested=True)
    elif sys.argv[1] == "serve":
        run(serve(sys.argv[2], int(sys.argv[3]), float(sys.argv[4])))


if __name__ == "__main__":
    main()
