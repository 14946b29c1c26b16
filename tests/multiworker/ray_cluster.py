"""A Ray head on 127.0.0.1 for tests, and teardown that leaves nothing running.

Ray turns a loopback node address into the host's interface address on
purpose; `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0` in the environment of every
process that starts or joins Ray keeps it 127.0.0.1 (`PIN`). Every Ray
process of a head started here carries its own temp dir in its command line
(raylet, gcs_server, monitors); teardown kills those processes and their
children (the `ray::` workers) by pid, and `leftovers()` lets a test assert
that none is left.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

import psutil

from tests import warm_python
from tests.multiworker import harness

PIN = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
os.environ.update(PIN)  # this process, too, if it ever starts Ray
RAY = os.path.join(os.path.dirname(sys.executable), "ray")


def env(**extra) -> dict:
    """The environment of a test process that starts or joins Ray."""
    e = dict(
        os.environ,
        **PIN,
        TF_CPP_MIN_LOG_LEVEL="2",
        RAY_USAGE_STATS_ENABLED="0",
        # loopback only; Ray's default token check would need the
        # token file of the head shared with each joining process
        RAY_AUTH_MODE="disabled",
        PYTHONPATH=harness.REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    e.pop("TF_CONFIG", None)
    manager = os.environ.get(warm_python.MANAGER_ENV)
    if manager:
        # Ray's own way to give a driver's job a runtime env (what `ray job
        # submit` does): every Ray worker process of the job starts through
        # this pytest process's warm zygotes (tests/warm_python.py), as the
        # tests' other subprocesses do, instead of importing TensorFlow cold.
        e["RAY_JOB_CONFIG_JSON_ENV_VAR"] = json.dumps(
            {
                "runtime_env": {
                    "py_executable": shlex.join(warm_python.PYTHON),
                    "env_vars": {warm_python.MANAGER_ENV: manager},
                }
            }
        )
    e.update(extra)
    return e


def _tagged(tag: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if p.pid != os.getpid() and any(tag in a for a in (p.info["cmdline"] or [])):
                found.append(p)
        except psutil.Error:
            pass
    return found


def leftovers(tag: str) -> list[str]:
    """Command lines of live processes whose arguments mention `tag`."""
    out = []
    for p in _tagged(tag):
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                out.append(" ".join(p.cmdline())[:160])
        except psutil.Error:
            pass
    return out


def kill_tagged(tag: str) -> None:
    """SIGKILLs every process mentioning `tag`, with all its children."""
    procs = set()
    for p in _tagged(tag):
        procs.add(p)
        try:
            procs.update(p.children(recursive=True))
        except psutil.Error:
            pass
    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(list(procs), timeout=15)


class Head:
    """`ray start --head` on 127.0.0.1 with a private temp dir; `stop()` kills it."""

    def __init__(self, num_cpus: int = 2, num_gpus: int = 0, extra_env: dict | None = None):
        self.temp_dir = tempfile.mkdtemp(prefix="rt_", dir="/tmp")  # short: socket paths
        # Ray's fixed defaults (dashboard 8265, agent 52365, Ray Client
        # 10001) would collide with another head on this host (the suite
        # starts its longest files, the Ray ones, side by side).
        self.port, dashboard, agent, client = harness.free_ports(4)
        self.address = f"127.0.0.1:{self.port}"
        try:
            subprocess.run(
                [
                    RAY,
                    "start",
                    "--head",
                    f"--port={self.port}",
                    f"--num-cpus={num_cpus}",
                    "--include-dashboard=false",
                    *([f"--num-gpus={num_gpus}"] if num_gpus else []),
                    f"--dashboard-port={dashboard}",
                    f"--dashboard-agent-listen-port={agent}",
                    f"--ray-client-server-port={client}",
                    "--disable-usage-stats",
                    f"--temp-dir={self.temp_dir}",
                ],
                # A node declaring GPUs refuses a CUDA_VISIBLE_DEVICES with
                # fewer entries (the suite's "-1" hides TF's GPU probing).
                env={
                    k: v
                    for k, v in env(**(extra_env or {})).items()
                    if not (num_gpus and k == "CUDA_VISIBLE_DEVICES")
                },
                check=True,
                timeout=120,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        kill_tagged(self.temp_dir)
        subprocess.run(["rm", "-rf", self.temp_dir], check=False, timeout=60)


def group_starts(temp_dir: str) -> list[tuple[float, int]]:
    """[(wall time, size)] of each worker group Ray Train's controller started.

    Read from the controller's JSON logs under the Ray temp dir `temp_dir`
    (`ray start --temp-dir`; the controller runs beside the driver).
    """
    starts = []
    logs = os.path.join(temp_dir, "session_latest", "logs", "train")
    for name in sorted(os.listdir(logs)):
        if not name.startswith("ray-train-sys-controller-"):
            continue
        with open(os.path.join(logs, name)) as f:
            for line in f:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                m = re.match(
                    r"Attempting to start training worker group of size (\d+)",
                    record.get("message", ""),
                )
                if m:
                    when = datetime.datetime.strptime(record["asctime"], "%Y-%m-%d %H:%M:%S,%f")
                    starts.append((when.timestamp(), int(m.group(1))))
    return starts
