"""Emulated hosts for benchmarks and tests: network namespaces joined by a bridge.

`benchmarks/link_speed.py` uses it, and the multi-host tests through
`tests/hosts/testbed.py` (benchmarks do not import from `tests/`, so it
lives here).

`TestBed(n)` makes n hosts on this machine, each a Linux network namespace
with its own address (198.18.0.10, .11, ...: the RFC 2544 benchmark range
198.18.0.0/15, never a real network) and its own loopback (up, so
127.0.0.1 works inside a host). Each host's link is a veth pair whose other
end is a port of a bridge in a separate "switch" namespace; both ends are
shaped with `tc ... tbf` (1 Gbit/s by default). `netem` may be missing from
the kernel, so a link has bandwidth but no added delay or loss.

- `run(host, argv)` / `popen(host, argv)` run a command inside a host
  (`ip netns exec`), in its own process group; `cut(host)` takes the host's
  bridge port down: a silent partition (no RST, packets just stop), as when
  a cable is pulled; `heal(host)` brings it back.
- `close()` kills every process the test bed started (by process group,
  then anything still living in its namespaces) and deletes the
  namespaces. It runs from the benchmark's `finally` or the test fixture's finalizer,
  from `atexit`, and a new
  test bed deletes the namespaces of test beds whose process died without
  either (SIGKILL).

Names carry this process's pid (`tfbb<pid>x<serial>...`), so test beds of
parallel test processes never collide. The hosts have one route, to
198.18.0.0/24 through the bridge: their traffic stays between the
namespaces the test made.

Needs Linux, root (CAP_NET_ADMIN) and iproute2 (`ip`, `tc`);
`unavailable_reason()` says which is missing, for a skip.
"""

from __future__ import annotations

import atexit
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import weakref

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PREFIX = "tfbb"
SUBNET = "198.18.0"
_NAME = re.compile(rf"^{PREFIX}(\d+)x\d+")
_SERIAL = itertools.count()
_OPEN: "weakref.WeakSet[TestBed]" = weakref.WeakSet()
_PROBED: list[str | None] = []


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


def _tc(*args: str) -> None:
    subprocess.run(["tc", *args], capture_output=True, text=True, timeout=30, check=True)


def namespaces() -> list[str]:
    """Every network namespace name `ip netns list` shows."""
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def unavailable_reason() -> str | None:
    """Why emulated hosts cannot be made here, or None when they can.

    Probes once per process by adding and deleting a namespace.
    """
    if _PROBED:
        return _PROBED[0]
    reason = None
    if not sys.platform.startswith("linux"):
        reason = f"emulated hosts need Linux network namespaces (this is {sys.platform})"
    elif not shutil.which("ip") or not shutil.which("tc"):
        reason = "emulated hosts need iproute2 (`ip` and `tc` on PATH)"
    else:
        probe = f"{PREFIX}{os.getpid()}xprobe"
        made = _ip("netns", "add", probe, check=False)
        if made.returncode != 0:
            reason = (
                "emulated hosts need root with CAP_NET_ADMIN (`ip netns add` "
                f"failed: {made.stderr.strip()})"
            )
        else:
            _ip("netns", "del", probe, check=False)
    _PROBED.append(reason)
    return reason


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_namespace_processes(ns: str) -> None:
    """SIGKILLs every process living in namespace `ns` (all started inside it)."""
    out = _ip("netns", "pids", ns, check=False).stdout
    for pid in (int(p) for p in out.split() if p.isdigit()):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def sweep_stale() -> list[str]:
    """Deletes namespaces of test beds whose process no longer runs."""
    gone = []
    for ns in namespaces():
        m = _NAME.match(ns)
        if m and int(m.group(1)) != os.getpid() and not _pid_alive(int(m.group(1))):
            _kill_namespace_processes(ns)
            _ip("netns", "del", ns, check=False)
            gone.append(ns)
    return gone


class Host:
    """One emulated host: its namespace, address and bridge port."""

    def __init__(self, index: int, ns: str, address: str, port: str):
        self.index, self.ns, self.address, self.port = index, ns, address, port

    def __repr__(self) -> str:
        return f"Host({self.index}, {self.address}, ns={self.ns})"


class TestBed:
    """n emulated hosts on one bridge (see the module docstring).

    Args:
        n: int. Number of hosts.
        rate: str or None. `tc` rate of each link, both ends (e.g. "1gbit",
            "10gbit"); None leaves the links unshaped.
    """

    __test__ = False  # not a pytest test class

    def __init__(self, n: int, rate: str | None = "1gbit"):
        if not isinstance(n, int) or not 1 <= n <= 200:
            raise ValueError(
                f"Invalid value for `n`: expected an int in [1, 200]. Received: n={n!r}"
            )
        sweep_stale()
        self.name = f"{PREFIX}{os.getpid()}x{next(_SERIAL)}"
        self.switch = f"{self.name}sw"
        self.hosts: list[Host] = []
        self._procs: list[subprocess.Popen] = []
        self._closed = False
        _OPEN.add(self)
        try:
            self._make(n, rate)
        except BaseException:
            self.close()
            raise

    # ---------------------------------------------------------- set-up
    def _make(self, n: int, rate: str | None) -> None:
        _ip("netns", "add", self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        for i in range(n):
            host = Host(i, f"{self.name}h{i}", f"{SUBNET}.{10 + i}", f"p{i}")
            self.hosts.append(host)
            _ip("netns", "add", host.ns)
            _ip("-n", host.ns, "link", "set", "lo", "up")
            _ip(
                "link",
                "add",
                "eth0",
                "netns",
                host.ns,
                "type",
                "veth",
                "peer",
                "name",
                host.port,
                "netns",
                self.switch,
            )
            _ip("-n", host.ns, "addr", "add", f"{host.address}/24", "dev", "eth0")
            _ip("-n", host.ns, "link", "set", "eth0", "up")
            _ip("-n", self.switch, "link", "set", host.port, "master", "br0")
            _ip("-n", self.switch, "link", "set", host.port, "up")
            if rate:
                for ns, dev in ((host.ns, "eth0"), (self.switch, host.port)):
                    _tc(
                        "-n",
                        ns,
                        "qdisc",
                        "add",
                        "dev",
                        dev,
                        "root",
                        "tbf",
                        "rate",
                        rate,
                        "burst",
                        "512kb",
                        "latency",
                        "100ms",
                    )

    def __getitem__(self, index: int) -> Host:
        return self.hosts[index]

    def __len__(self) -> int:
        return len(self.hosts)

    def namespaces(self) -> list[str]:
        return [self.switch] + [h.ns for h in self.hosts]

    # --------------------------------------------------------- commands
    def _host(self, host) -> Host:
        return self.hosts[host] if isinstance(host, int) else host

    @staticmethod
    def env(extra: dict | None = None) -> dict:
        """This process's environment plus the repository on PYTHONPATH."""
        env = dict(os.environ)
        env.pop("TF_CONFIG", None)
        env.update(
            {
                "TF_CPP_MIN_LOG_LEVEL": "2",
                "PYTHONPATH": REPO_ROOT + os.pathsep + env.get("PYTHONPATH", ""),
            }
        )
        env.update(extra or {})
        return env

    def popen(self, host, argv: list[str], env: dict | None = None, **kwargs) -> subprocess.Popen:
        """Starts `argv` inside `host` in a new process group (killed by `close`).

        `env` is the whole environment (default: `env()`); other keyword
        arguments go to `subprocess.Popen` (default: text, stdout and stderr
        piped together, cwd the repository).
        """
        if self._closed:
            raise RuntimeError(f"test bed {self.name} is closed")
        kwargs.setdefault("stdout", subprocess.PIPE)
        kwargs.setdefault("stderr", subprocess.STDOUT)
        kwargs.setdefault("text", True)
        kwargs.setdefault("cwd", REPO_ROOT)
        proc = subprocess.Popen(
            ["ip", "netns", "exec", self._host(host).ns, *argv],
            env=self.env() if env is None else env,
            start_new_session=True,
            **kwargs,
        )
        self._procs.append(proc)
        return proc

    def run(
        self, host, argv: list[str], timeout: float = 60, env: dict | None = None, **kwargs
    ) -> subprocess.CompletedProcess:
        """Runs `argv` inside `host` and waits (killed at `timeout`, then raises)."""
        proc = self.popen(host, argv, env=env, **kwargs)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill(proc)
            proc.communicate()
            raise
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    @staticmethod
    def kill(proc: subprocess.Popen) -> None:
        """SIGKILLs `proc`'s process group and reaps it."""
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def kill_processes(self, host) -> None:
        """SIGKILLs every process living in `host` (daemons included)."""
        _kill_namespace_processes(self._host(host).ns)

    # ------------------------------------------------------------ links
    def cut(self, host) -> None:
        """Takes `host`'s bridge port down: its packets just stop (no RST)."""
        _ip("-n", self.switch, "link", "set", self._host(host).port, "down")

    def heal(self, host) -> None:
        """Brings `host`'s bridge port back up."""
        _ip("-n", self.switch, "link", "set", self._host(host).port, "up")

    # ---------------------------------------------------------- cleanup
    def close(self) -> None:
        """Kills every process started here and deletes the namespaces (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for proc in self._procs:
            if proc.poll() is None:
                self.kill(proc)
            for stream in (proc.stdout, proc.stderr, proc.stdin):
                if stream is not None:
                    stream.close()
        mine = set(namespaces())
        for ns in self.namespaces():
            if ns in mine:
                _kill_namespace_processes(ns)
        deadline = time.monotonic() + 10
        for ns in self.namespaces():
            if ns not in mine:
                continue
            while (
                _ip("netns", "pids", ns, check=False).stdout.strip() and time.monotonic() < deadline
            ):
                time.sleep(0.05)
            _ip("netns", "del", ns, check=False)
        _OPEN.discard(self)

    def __enter__(self) -> "TestBed":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@atexit.register
def _close_all() -> None:
    for bed in list(_OPEN):
        bed.close()
