"""A Ray cluster across emulated hosts, and a launch on it to pace and watch.

`start_head` / `start_node` run `ray start` inside a test bed host (one CPU
each, token authentication on, `HOME` a temporary directory so no real
`~/.ray/auth_token` is read or written). The head declares a node that
stops answering dead after ~3-9 s (`HEALTH`), as docs/deploy/ray.md tells
users to configure their own head; Ray's defaults take ~65 s.

`Launch` runs `tfdist-opt launch --ray ...` of
tests/multiworker/scripts/rel_train.py in host 0 and collects its output;
the script's marker files (`training-<index>-<attempt>`, committed backups)
tell a test which phase the run is in, and a pace file slows or holds the
workers (see that script).
"""

from __future__ import annotations

import os
import secrets
import sys
import threading
import time

from tests.hosts import per_host
from tests.multiworker import ray_cluster

RAY = os.path.join(os.path.dirname(sys.executable), "ray")
SCRIPT = "tests/multiworker/scripts/rel_train.py"
# Ray's GCS health check of each raylet: every second, 2 s to answer, dead
# after 3 misses in a row (Ray's defaults: 3 s, 10 s, 5: ~65 s).
HEALTH = {
    "RAY_health_check_period_ms": "1000",
    "RAY_health_check_timeout_ms": "2000",
    "RAY_health_check_failure_threshold": "3",
}
_COMMON = ["--num-cpus=1", "--disable-usage-stats", "--object-store-memory=100000000"]


def ray_env(home: str) -> dict:
    """The environment of every Ray process and driver of the cluster."""
    env = per_host.host_env(
        {
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": secrets.token_hex(32),
            "HOME": home,
            "RAY_USAGE_STATS_ENABLED": "0",
        }
    )
    # tests/conftest.py pins Ray to 127.0.0.1 with this; Ray 2.60's `ray
    # start --address` refuses to join while it is set to 0 ("Multi-node Ray
    # clusters are not supported on Windows and OSX").
    env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
    return env


def start_head(bed, env: dict, home: str) -> str:
    """Starts the head in host 0; returns its address."""
    h0 = bed[0].address
    head = bed.run(
        0,
        [
            RAY,
            "start",
            "--head",
            f"--node-ip-address={h0}",
            "--port=6379",
            "--include-dashboard=false",
            *_COMMON,
            f"--temp-dir={home}/t0",
        ],
        env={**env, **HEALTH},
        timeout=150,
    )
    assert head.returncode == 0, head.stdout[-3000:]
    return f"{h0}:6379"


def start_node(bed, host: int, address: str, env: dict, home: str) -> None:
    """Starts a node in `host` that joins the head at `address`."""
    node = bed.run(
        host,
        [
            RAY,
            "start",
            f"--address={address}",
            f"--node-ip-address={bed[host].address}",
            *_COMMON,
            f"--temp-dir={home}/t{host}",
        ],
        env=env,
        timeout=150,
    )
    assert node.returncode == 0, node.stdout[-3000:]


def restart_node(bed, host: int, address: str, env: dict, home: str) -> None:
    """SIGKILLs everything in `host` (its raylet and workers), then joins it again."""
    bed.kill_processes(host)
    start_node(bed, host, address, env, home)


class Launch:
    """`tfdist-opt launch --ray ADDRESS OPTIONS -- python rel_train.py ...` in host 0."""

    def __init__(self, bed, address, env, options, out, backup, pace, kwargs):
        self.out, self.backup, self.pace = out, backup, pace
        self.lines: list[str] = []
        self.proc = bed.popen(
            0,
            [
                sys.executable,
                "-m",
                "tfdist_opt",
                "launch",
                "--ray",
                address,
                *options,
                "--",
                "python",
                SCRIPT,
                "--out",
                str(out),
                "--backup",
                str(backup),
                "--pace-file",
                str(pace),
                "--strategy-kwargs",
                kwargs,
            ],
            env=env,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def text(self, tail: int = 4000) -> str:
        return "\n".join(self.lines)[-tail:]

    def wait(self, predicate, timeout: float, what: str):
        """Polls `predicate` until it returns something not None; returns that."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = predicate()
            if found is not None:
                return found
            if self.proc.poll() is not None:
                self._reader.join(timeout=10)
                raise AssertionError(
                    f"launch ended ({self.proc.returncode}) before {what}:\n{self.text()}"
                )
            time.sleep(0.1)
        raise AssertionError(f"no {what} within {timeout} s:\n{self.text()}")

    def finish(self, timeout: float) -> int:
        """Waits for the launch to end; returns its exit code (raises at `timeout`)."""
        self.proc.wait(timeout=timeout)
        self._reader.join(timeout=10)
        return self.proc.returncode

    def set_pace(self, value: str) -> None:
        """Writes the pace file in one step (a worker never reads half of it)."""
        tmp = self.pace.with_suffix(".tmp")
        tmp.write_text(value)
        os.replace(tmp, self.pace)

    def trained(self, after: int = -1) -> dict:
        """{attempt: sorted worker indices that trained a batch}, attempts > after."""
        seen = {}
        for name in os.listdir(self.out) if self.out.exists() else ():
            if name.startswith("training-"):
                _, index, attempt = name.split("-")
                if int(attempt) > after:
                    seen.setdefault(int(attempt), []).append(int(index))
        return {a: sorted(v) for a, v in seen.items()}

    def attempt_on(self, workers: list[int], after: int):
        """The newest attempt > `after` whose workers `workers` trained, or None."""
        hits = [a for a, w in self.trained(after).items() if w == workers]
        return max(hits) if hits else None

    def backup_after(self, step: int, backup=None):
        """The newest committed backup step > `step` (in `backup`), or None."""
        backup = self.backup if backup is None else backup
        steps = [
            int(n.split("-")[1])
            for n in (os.listdir(backup) if backup.exists() else ())
            if n.startswith("backup-") and (backup / n / "manifest.json").exists()
        ]
        steps = [s for s in steps if s > step]
        return max(steps) if steps else None

    def finished(self):
        """The newest attempt whose worker 0 wrote its final result, or None."""
        done = [
            int(n.split("-")[1])
            for n in os.listdir(self.out)
            if n.startswith("attempt-") and n.endswith("-worker-0.json")
        ]
        return max(done) if done else None


def group_starts(home: str) -> list[tuple[float, int]]:
    """[(wall time, size)] of each worker group Ray Train's controller started.

    The controller runs beside the driver, in host 0: its logs are in the
    head's temp dir.
    """
    return ray_cluster.group_starts(os.path.join(home, "t0"))
