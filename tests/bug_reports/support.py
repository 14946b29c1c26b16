"""What the bug-report tests share: the strategies they run under, tolerances,
and running a test in a pytest process of its own.

Tolerances: float32 against one device without a strategy, rtol 1e-5 (the
all-reduce adds the replicas' gradients in another order).
"""

import functools
import inspect
import os
import pathlib
import subprocess
import sys

import tfdist_opt

RTOL = 1e-5

CHILD = "TFDIST_TEST_BUG_REPORT_CHILD"
ROOT = pathlib.Path(__file__).resolve().parents[2]


def two_replicas():
    """`opt_strategy()` on 2 of this process's virtual CPUs (tests/conftest.py)."""
    strategy = tfdist_opt.opt_strategy(cpu_replicas=2)
    assert strategy.num_replicas_in_sync == 2
    return strategy


def one_device():
    """`opt_strategy()` on one device: the reference."""
    return tfdist_opt.opt_strategy()


def in_child() -> bool:
    """True in the pytest process `own_process` starts."""
    return os.environ.get(CHILD) == "1"


def own_process(test):
    """Runs `test` in a pytest process of its own.

    A multi-worker strategy configures TensorFlow's collective ops for the
    whole process, and two in one process share collective instance keys:
    the tests that build one run alone, in a child pytest (10 minutes at
    most), so the rest of the suite's process never sees it. The child runs
    with `--runxfail`: an expected failure fails there, and the parent's
    mark judges it.
    """
    path = pathlib.Path(inspect.getsourcefile(test)).resolve().relative_to(ROOT)

    @functools.wraps(test)
    def run(*args, **kwargs):
        if in_child():
            return test(*args, **kwargs)
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-n",
                "0",
                "-q",
                "--runxfail",
                "-p",
                "no:cacheprovider",
                f"{path}::{test.__name__}",
            ],
            env={**os.environ, CHILD: "1"},
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]

    return run
