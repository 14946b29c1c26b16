"""The test bed itself: it makes hosts, cuts and heals links, and cleans up.

Cleanup is checked from outside: a test bed made in a child process that
then fails a test, is interrupted, or exits without closing must leave no
namespace and no process behind.
"""

import os
import subprocess
import sys
import textwrap

import pytest

from tests.hosts import testbed as testbed_lib

HOSTS = 2

# A tiny TCP echo: serve on ADDRESS:PORT inside one host, connect from another.
_SERVE = (
    "import socket,sys;s=socket.socket();s.setsockopt(socket.SOL_SOCKET,"
    "socket.SO_REUSEADDR,1);s.bind((sys.argv[1],int(sys.argv[2])));s.listen();"
    "print('ready',flush=True)\nwhile True:\n c,_=s.accept();c.sendall(b'hi');c.close()"
)
_CONNECT = (
    "import socket,sys\ntry:\n c=socket.create_connection((sys.argv[1],"
    "int(sys.argv[2])),timeout=float(sys.argv[3]));print(c.recv(2).decode())\n"
    "except OSError as e:\n print('unreachable',type(e).__name__)"
)


def _connect(bed, host, address, port=5000, timeout=3.0) -> str:
    return bed.run(
        host, [sys.executable, "-c", _CONNECT, address, str(port), str(timeout)], timeout=30
    ).stdout.strip()


def _mine(prefix):
    return [ns for ns in testbed_lib.namespaces() if ns.startswith(prefix)]


@pytest.fixture(scope="module")
def server(testbed):
    proc = testbed.popen(1, [sys.executable, "-c", _SERVE, testbed[1].address, "5000"])
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_hosts_have_their_own_addresses_loopback_and_one_route(testbed):
    assert [h.address for h in testbed.hosts] == ["198.18.0.10", "198.18.0.11"]
    for host in testbed.hosts:
        addrs = testbed.run(host, ["ip", "-o", "addr"]).stdout
        assert f"inet {host.address}/24" in addrs and "inet 127.0.0.1/8" in addrs
        assert (
            " UP " in testbed.run(host, ["ip", "link", "show", "lo"]).stdout
            or "LOOPBACK,UP" in testbed.run(host, ["ip", "link", "show", "lo"]).stdout
        )
        # Only the test bed's subnet is routed: no way out to a real network.
        routes = testbed.run(host, ["ip", "route"]).stdout.strip().splitlines()
        assert routes == [f"198.18.0.0/24 dev eth0 proto kernel scope link src {host.address}"], (
            routes
        )
        # Both ends of the link are shaped.
        qdisc = testbed.run(host, ["tc", "qdisc", "show", "dev", "eth0"]).stdout
        assert "tbf" in qdisc and "rate 1Gbit" in qdisc, qdisc
    assert len(set(testbed.namespaces())) == 3
    assert all(str(os.getpid()) in ns for ns in testbed.namespaces())


def test_a_host_reaches_another_and_a_cut_is_silent_until_healed(testbed, server):
    assert _connect(testbed, 0, testbed[1].address) == "hi"
    # Loopback inside a host works; the other host's address is not local there.
    assert _connect(testbed, 1, "127.0.0.1").startswith("unreachable ConnectionRefused")
    testbed.cut(1)
    try:
        # A silent partition: the connection attempt times out (no refusal, no reset).
        assert _connect(testbed, 0, testbed[1].address, timeout=1.5) == "unreachable TimeoutError"
    finally:
        testbed.heal(1)
    assert _connect(testbed, 0, testbed[1].address, timeout=10) == "hi"


def test_close_kills_its_processes_and_deletes_its_namespaces():
    bed = testbed_lib.TestBed(2, rate=None)
    names = bed.namespaces()
    assert set(names) <= set(testbed_lib.namespaces())
    sleeper = bed.popen(0, [sys.executable, "-c", "import time; time.sleep(600)"])
    # A grandchild in its own session: found through the namespace, not the group.
    orphan = bed.run(1, ["sh", "-c", "setsid sleep 600 >/dev/null 2>&1 & echo $!"])
    orphan_pid = int(orphan.stdout.strip())
    bed.close()
    assert sleeper.poll() is not None
    assert not set(names) & set(testbed_lib.namespaces())
    assert (
        not os.path.exists(f"/proc/{orphan_pid}")
        or open(f"/proc/{orphan_pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"
    )
    bed.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        bed.popen(0, ["true"])


def test_invalid_host_count_is_refused():
    with pytest.raises(ValueError, match=r"Invalid value for `n`.*Received: n=0"):
        testbed_lib.TestBed(0)


_CHILD_TEST = textwrap.dedent("""
    import os, sys, time
    import pytest
    pytest_plugins = []
    HOSTS = 1

    def test_uses_it(testbed):
        testbed.popen(0, [sys.executable, "-c", "import time; time.sleep(600)"])
        print("NAMESPACES", " ".join(testbed.namespaces()), flush=True)
        {action}
""")


@pytest.mark.parametrize(
    "action",
    [
        "assert False, 'a failing test'",
        "raise KeyboardInterrupt",
        "os._exit(0)",  # no finalizer: atexit is not run either; the next test bed sweeps
    ],
)
def test_nothing_is_left_when_a_test_fails_or_is_interrupted(tmp_path, action):
    test_file = tmp_path / "test_child.py"
    test_file.write_text(_CHILD_TEST.format(action=action))
    conftest = os.path.join(os.path.dirname(__file__), "conftest.py")
    (tmp_path / "conftest.py").write_text(open(conftest).read())
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    env = {
        k: v
        for k, v in testbed_lib.TestBed.env().items()
        if not k.startswith(("PYTEST_", "TFDIST_TEST_WARM"))
    }
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            "-q",
            "-s",
            "--rootdir",
            str(tmp_path),
            "-c",
            str(tmp_path / "pytest.ini"),
            str(test_file),
        ],
        cwd=testbed_lib.REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    lines = [l for l in p.stdout.splitlines() if l.startswith("NAMESPACES ")]
    assert lines, p.stdout[-3000:] + p.stderr[-3000:]
    names = lines[0].split()[1:]
    if action.startswith("os._exit"):
        testbed_lib.sweep_stale()
    assert not set(names) & set(testbed_lib.namespaces()), p.stdout[-2000:]
    assert p.returncode != 0 or action.startswith("os._exit")


def test_a_process_that_never_closes_its_test_bed_removes_it_at_exit():
    code = (
        "import sys\nfrom tests.hosts import testbed\nb = testbed.TestBed(1, rate=None)\n"
        "b.popen(0, [sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        "print(' '.join(b.namespaces()), flush=True)"
    )
    p = subprocess.run(
        [sys.executable, "-c", code],
        cwd=testbed_lib.REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=testbed_lib.TestBed.env(),
    )
    names = p.stdout.split()
    assert p.returncode == 0 and len(names) == 2, p.stdout + p.stderr
    assert not set(names) & set(testbed_lib.namespaces())
