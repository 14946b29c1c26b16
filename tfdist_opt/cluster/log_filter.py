"""Quiet worker output for `tfdist-opt launch`: TensorFlow's start-up noise out.

A TF 2.21 worker on a CPU host prints about a dozen C++ lines per process
before the first step (oneDNN, cuda stubs, cpu_feature_guard, coordination
service, gRPC server; some of them twice); two workers bury the result. `launch` therefore, unless
`--verbose`:

1. sets `TF_CPP_MIN_LOG_LEVEL=2` in each worker's environment when the
   user has not set it: TensorFlow's C++ INFO and WARNING lines are not
   printed, ERROR and FATAL still are (TF's own switch, read by its C++
   logger at start-up; Python logging, absl `logging` and `print` are
   unaffected);
2. drops the few start-up lines that remain at that level and say nothing
   about the job: absl's "All log messages before absl::InitializeLog()"
   notice, and the `failed call to cuInit` error on a host with no NVIDIA
   driver (`/proc/driver/nvidia/version` absent: there is no GPU to use).

Every other line — tracebacks, our own one-line decisions, TensorFlow
errors — passes unchanged. Pure Python.
"""

from __future__ import annotations

import os
import re
from typing import Mapping

TF_LOG_LEVEL_ENV = "TF_CPP_MIN_LOG_LEVEL"
QUIET_LEVEL = "2"  # 0 all, 1 no INFO, 2 no INFO/WARNING, 3 no ERROR either
_NVIDIA_DRIVER = "/proc/driver/nvidia/version"

_ALWAYS = (
    re.compile(r"^WARNING: All log messages before absl::InitializeLog\(\) is "
               r"called are written to STDERR$"),
)
_NO_DRIVER = (
    re.compile(r"^E\d{4} [\d:. ]+\d+ cuda_(platform|driver|executor)\.cc:\d+\] "
               r"failed call to cuInit"),
)


def quiet_env(env: Mapping[str, str]) -> tuple[dict[str, str], bool]:
    """`env` with `TF_CPP_MIN_LOG_LEVEL=2` unless the user set a level.

    Returns:
        (new environment, whether this function set the level).
    """
    out = dict(env)
    if out.get(TF_LOG_LEVEL_ENV, "") != "":
        return out, False
    out[TF_LOG_LEVEL_ENV] = QUIET_LEVEL
    return out, True


def has_nvidia_driver() -> bool:
    return os.path.exists(_NVIDIA_DRIVER)


class StartupNoiseFilter:
    """`keep(line)`: False for known start-up noise; counts what it hid.

    Args:
        nvidia_driver: bool or None. Whether this host has an NVIDIA driver
            (then a failed cuInit is a real error and is kept). Defaults to
            `None`: look at `/proc/driver/nvidia/version`.
    """

    def __init__(self, nvidia_driver: bool | None = None):
        driver = has_nvidia_driver() if nvidia_driver is None else nvidia_driver
        self.patterns = _ALWAYS + (() if driver else _NO_DRIVER)
        self.hidden = 0

    def keep(self, line: str) -> bool:
        text = line.rstrip("\n")
        if any(p.search(text) for p in self.patterns):
            self.hidden += 1
            return False
        return True

    def __call__(self, line: str) -> bool:
        return self.keep(line)
