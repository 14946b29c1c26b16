"""Running `tfdist-opt launch`'s per-host lines on a test bed, for tests."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys

from tests.hosts import testbed as testbed_lib

BIN = os.path.dirname(sys.executable)  # `python` and `tfdist-opt` of this venv


def host_env(extra: dict | None = None) -> dict:
    """A host's environment: this venv's `python` first on PATH, the repo importable."""
    env = testbed_lib.TestBed.env(extra)
    env["PATH"] = BIN + os.pathsep + env.get("PATH", "")
    return env


def launch_lines(*options: str, command: list[str]) -> list[tuple[str, str, int, str]]:
    """(address, task type, index, shell line) for each task, from the CLI's output.

    `tfdist-opt launch --workers H:P,... [--ps H:P] -- CMD` prints, per task,
    a comment `# TYPE INDEX on H:P` and the line to run on that host.
    """
    p = subprocess.run(
        [sys.executable, "-m", "tfdist_opt", "launch", *options, "--", *command],
        capture_output=True,
        text=True,
        timeout=60,
        env=host_env(),
        cwd=testbed_lib.REPO_ROOT,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    out = []
    lines = p.stdout.splitlines()
    for comment, line in zip(lines, lines[1:]):
        parts = comment.split()
        if comment.startswith("# ") and len(parts) == 5 and parts[3] == "on":
            out.append((parts[4], parts[1], int(parts[2]), line))
    assert out, p.stdout
    return out


def host_of(bed, address: str):
    """The test bed host whose address is `address`'s host part."""
    ip = address.rsplit(":", 1)[0]
    return next(h for h in bed.hosts if h.address == ip)


def start_lines(bed, lines, extra_env: dict | None = None) -> list[subprocess.Popen]:
    """Starts each per-host line in its host (`sh -c LINE`, as a person pastes it)."""
    return [
        bed.popen(host_of(bed, address), ["sh", "-c", line], env=host_env(extra_env))
        for address, _, _, line in lines
    ]


def finish(bed, procs, timeout: float) -> list[tuple[int | None, str]]:
    """(exit code or None if killed at the deadline, output) of each process."""
    import time

    deadline = time.monotonic() + timeout
    out = []
    for p in procs:
        try:
            text, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            out.append((p.returncode, text))
        except subprocess.TimeoutExpired:
            bed.kill(p)
            text, _ = p.communicate()
            out.append((None, text))
    return out


def results(text: str) -> list[dict]:
    """The `RESULT {json}` lines of an output."""
    return [
        json.loads(line.split("RESULT ", 1)[1])
        for line in text.splitlines()
        if line.startswith("RESULT ")
    ]


def quoted(argv) -> str:
    return shlex.join(argv)
