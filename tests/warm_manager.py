"""The test session's warm-Python manager: one zygote per import environment.

`tests/warm_python.py` is the client and the zygote; this is the thread that
starts zygotes on request (`Manager.zygote`) and kills them at the end
(`close`). The pytest process runs one (tests/conftest.py): pytest-xdist's
controller, whose workers share it, or the one process under `-n 0`.
"""

from __future__ import annotations

import json
import os
import socket
import sys

from tests import warm_python


class Manager:
    """The session's zygotes, one per (import environment, task slot).

    Runs as a thread in the pytest process (so zygotes are its children, not
    a launcher's, and outlive every launch); `close()` kills them all.
    """

    # A zygote idle this long exits (~250 MB of its own each; a new one costs
    # a TensorFlow import, ~4 CPU-s): 90 s restarted the busiest keys 3-4
    # times a run.
    def __init__(self, directory: str, idle_s: float = 180.0):
        import threading

        self.dir = directory
        self.idle_s = idle_s
        self.path = os.path.join(directory, "manager.sock")
        self._procs: dict[str, object] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        warm_python.write_nested_python(self.path)
        self._sock = socket.socket(socket.AF_UNIX)
        self._sock.bind(self.path)
        self._sock.listen(64)
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="warm-python-manager", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        import threading

        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            try:
                req = json.loads(warm_python.recv_line(conn))
                path = self.zygote(req["env"], req["slot"])
                conn.sendall((json.dumps({"path": path}) + "\n").encode())
            except Exception as e:  # noqa: BLE001 - the client falls back
                try:
                    conn.sendall((json.dumps({"error": repr(e)}) + "\n").encode())
                except OSError:
                    pass

    def zygote(self, env: dict, slot: str) -> str:
        import hashlib
        import subprocess
        import threading
        import time

        key = hashlib.sha1(json.dumps([sorted(env.items()), slot]).encode()).hexdigest()[:16]
        path = os.path.join(self.dir, key + ".sock")
        with self._lock:  # reap zygotes that idled out; one lock per key
            for k, p in list(self._procs.items()):
                if p.poll() is not None and k != key:
                    del self._procs[k]
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            proc = self._procs.get(key)
            if proc is not None and proc.poll() is None and os.path.exists(path):
                return path
            if proc is not None:
                proc.kill()
                proc.wait()
            if os.path.exists(path):
                os.unlink(path)
            zenv = dict(env)
            with open(os.path.join(self.dir, key + ".log"), "ab") as log:
                proc = subprocess.Popen(
                    [
                        sys.executable,
                        warm_python.HERE,
                        "serve",
                        path,
                        str(os.getpid()),
                        str(self.idle_s),
                    ],
                    env=zenv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    cwd=self.dir,
                    start_new_session=True,
                )
            self._procs[key] = proc
            if os.environ.get("TFDIST_TEST_WARM_LOG"):  # diagnostics: every zygote start
                with open(os.environ["TFDIST_TEST_WARM_LOG"], "a") as f:
                    f.write(
                        json.dumps(
                            {
                                "t": time.time(),
                                "key": key,
                                "slot": slot,
                                "pid": os.getpid(),
                                "env": env,
                            }
                        )
                        + "\n"
                    )
            deadline = time.monotonic() + 120
            while not os.path.exists(path):
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"zygote {key} did not start (see {key}.log)")
                time.sleep(0.02)
            return path

    def close(self) -> None:
        self._closed = True
        self._sock.close()
        with self._lock:
            for proc in list(self._procs.values()):
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
