"""StartupGuard / watch(): the start-up deadline, without TensorFlow."""

import io
import json
import os
import signal
import socket
import subprocess
import time

from tfdist_opt.coordination import startup_guard
from tfdist_opt.coordination import watchdog as watchdog_lib

CFG = {
    "cluster": {"chief": ["localhost:1000"], "worker": ["localhost:1001", "localhost:1002"]},
    "task": {"type": "worker", "index": 0},
}


def test_peer_addresses_excludes_self():
    assert startup_guard.peer_addresses(CFG) == [
        ("chief:0", "localhost:1000"),
        ("worker:1", "localhost:1002"),
    ]


def test_missing_peers_and_message():
    missing = startup_guard.missing_peers(CFG, probe=lambda a: a.endswith("1000"))
    assert missing == ["worker:1 (localhost:1002)"]
    text = startup_guard.timeout_message(CFG, 5, missing)
    assert text.startswith(
        "tfdist_opt: worker:0 gave up: multi-worker start-up did not "
        "finish within startup_timeout_s=5 s; not listening: worker:1 (localhost:1002)"
    )
    assert "every peer's port answers" in startup_guard.timeout_message(CFG, 5, [])


def test_is_listening_against_a_real_socket():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    port = s.getsockname()[1]
    try:
        assert startup_guard.is_listening(f"127.0.0.1:{port}")
    finally:
        s.close()
    assert not startup_guard.is_listening(f"127.0.0.1:{port}")


def test_watch_fires_after_deadline_and_kills():
    r, w = os.pipe()
    killed, err = [], io.StringIO()
    t0 = time.monotonic()
    fired = startup_guard.watch(
        4242,
        0.2,
        CFG,
        r,
        kill=lambda pid, sig: killed.append((pid, sig)),
        probe=lambda a: False,
        err=err,
    )
    assert fired and time.monotonic() - t0 >= 0.2
    assert killed == [(4242, signal.SIGKILL)]
    assert "not listening: chief:0 (localhost:1000), worker:1 (localhost:1002)" in err.getvalue()
    os.close(r), os.close(w)


def test_watch_stands_down_when_done():
    r, w = os.pipe()
    os.close(w)  # the guarded block finished
    killed = []
    assert not startup_guard.watch(1, 30, CFG, r, kill=lambda *a: killed.append(a))
    assert killed == []
    os.close(r)


def test_guard_process_exits_quietly_when_block_finishes():
    with startup_guard.StartupGuard(CFG, 30) as guard:
        watchdog = guard._watchdog
        assert watchdog.poll() is None
    assert watchdog.returncode == 0
    with startup_guard.StartupGuard(CFG, None) as guard:
        assert guard._watchdog is None


def test_guard_process_kills_its_parent_and_names_the_missing_peers():
    """The real watchdog process (started as `StartupGuard` starts it)."""
    victim = subprocess.Popen(["sleep", "60"])
    guard = subprocess.Popen(
        watchdog_lib.bare_python(
            "startup_guard", "_watchdog_main", str(victim.pid), "0.2", json.dumps(CFG)
        ),
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert victim.wait(timeout=30) == -signal.SIGKILL
        err = guard.communicate(timeout=30)[1]
    finally:
        for p in (victim, guard):
            p.kill()
            p.wait()
    assert "worker:0 gave up" in err and "chief:0 (localhost:1000)" in err, err
