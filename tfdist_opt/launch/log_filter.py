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
2. applies that level to the C++ lines TensorFlow prints before it reads
   the variable (seen on TF 2.21, CPU: `port.cc] oneDNN custom operations
   are on` and `cudart_stub.cc] Could not find cuda drivers` still appear
   at level 2): lines in TF's C++ log format (`I0000 00:00:... file.cc:N]`)
   below the effective level are dropped — the user's level if they set
   one, else 2;
3. drops more start-up lines that say nothing about the job: absl's
   "All log messages before absl::InitializeLog()" notice, TF 2.18/2.19's
   "Unable to register cuFFT/cuDNN/cuBLAS factory" errors, and the
   `failed call to cuInit` error on a host with no NVIDIA driver
   (`/proc/driver/nvidia/version` absent: there is no GPU to use).
   TF 2.18/2.19 print some C++ lines with another prefix
   (`2026-01-01 12:00:00.000000: E file.cc:N] ...`); both are read.

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

# TF's C++ log prefixes, severity letter first captured: absl's (TF 2.20,
# 2.21 and some 2.18/2.19 lines: severity, MMDD, time, thread id) and TSL's
# older one (TF 2.18/2.19: date, time, severity), then the source file:line].
_PREFIX = (
    r"^(?:([IWEF])\d{4} \d\d:\d\d:\d+\.\d+ +\d+ "
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: ([IWEF]) )"
)
_CPP_LINE = re.compile(_PREFIX + r"[\w./-]+:\d+\] ")
_SEVERITY = {"I": 0, "W": 1, "E": 2, "F": 3}
_ALWAYS = (
    re.compile(
        r"^WARNING: All log messages before absl::InitializeLog\(\) is "
        r"called are written to STDERR$"
    ),
    # TF 2.18/2.19, at import, on every host (an ERROR line about its own
    # plugin registry, tensorflow/tensorflow#62075): "Unable to register
    # cuFFT factory: Attempting to register factory for plugin cuFFT when
    # one has already been registered" (and cuDNN, cuBLAS).
    re.compile(
        _PREFIX + r"[\w./-]*cuda_(fft|dnn|blas)\.cc:\d+\] Unable to register "
        r"cu\w+ factory: Attempting to register factory for plugin cu\w+ "
        r"when one has already been registered$"
    ),
)
_NO_DRIVER = (
    re.compile(
        _PREFIX + r"[\w./-]*cuda_(platform|driver|executor)\.cc:\d+\] "
        r"failed call to cuInit"
    ),
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


def min_log_level(env: Mapping[str, str]) -> int:
    """TF_CPP_MIN_LOG_LEVEL as TensorFlow reads it (0 when unset or bad)."""
    try:
        return max(0, int(env.get(TF_LOG_LEVEL_ENV, "0") or 0))
    except ValueError:
        return 0


class StartupNoiseFilter:
    """`keep(line)`: False for known start-up noise; counts what it hid.

    Args:
        min_level: int. Drop C++ log lines of lower severity (0 INFO,
            1 WARNING, 2 ERROR, 3 FATAL), as TF_CPP_MIN_LOG_LEVEL does.
            ERROR and FATAL are never dropped. Defaults to `2`.
        nvidia_driver: bool or None. Whether this host has an NVIDIA driver
            (then a failed cuInit is a real error and is kept). Defaults to
            `None`: look at `/proc/driver/nvidia/version`.
    """

    def __init__(self, min_level: int = int(QUIET_LEVEL), nvidia_driver: bool | None = None):
        driver = has_nvidia_driver() if nvidia_driver is None else nvidia_driver
        self.patterns = _ALWAYS + (() if driver else _NO_DRIVER)
        self.min_level = min(min_level, 2)
        self.hidden = 0

    def keep(self, line: str) -> bool:
        text = line.rstrip("\n")
        m = _CPP_LINE.match(text)
        if (m and _SEVERITY[m.group(1) or m.group(2)] < self.min_level) or any(
            p.search(text) for p in self.patterns
        ):
            self.hidden += 1
            return False
        return True

    def __call__(self, line: str) -> bool:
        return self.keep(line)
