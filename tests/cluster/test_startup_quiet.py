"""A real TensorFlow start-up under `tfdist-opt launch` shows no C++ log line.

tests/cluster/test_log_filter.py checks the filter on recorded lines; this
one starts TensorFlow for real (import, device listing, one op), so a
TensorFlow version that prints a new start-up line fails here: the version
matrix (`.ci/version_matrix`) runs it on every TensorFlow it supports. The
worker is the real interpreter, not a warm fork, since TensorFlow's
import-time output is what is checked, and it sees the user's environment
(no `TF_CPP_MIN_LOG_LEVEL`, no `CUDA_VISIBLE_DEVICES`).
"""

import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent.parent
_CODE = ("import tensorflow as tf, keras\n"
         "tf.config.list_physical_devices('GPU')\n"
         "print('sum', float(tf.reduce_sum(tf.ones(3))))\n")


@pytest.mark.compat
def test_a_real_tensorflow_start_up_prints_nothing_under_launch():
    env = {k: v for k, v in os.environ.items()
           if k not in ("TF_CPP_MIN_LOG_LEVEL", "CUDA_VISIBLE_DEVICES", "TF_CONFIG")
           and not k.startswith("TFDIST_OPT_")}
    p = subprocess.run(
        [sys.executable, "-m", "tfdist_opt", "launch", "-n", "1", "--",
         sys.executable, "-c", _CODE],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stderr[-4000:]
    assert "[worker 0] sum 3.0" in p.stdout, p.stdout
    worker_lines = [ln for ln in (p.stdout + p.stderr).splitlines()
                    if ln.startswith("[worker 0]") and ln != "[worker 0] sum 3.0"]
    assert worker_lines == [], "\n".join(worker_lines)
