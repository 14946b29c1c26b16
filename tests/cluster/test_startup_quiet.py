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
_CODE = (
    "import tensorflow as tf, keras\n"
    "tf.config.list_physical_devices('GPU')\n"
    "print('sum', float(tf.reduce_sum(tf.ones(3))))\n"
)


@pytest.mark.compat
def test_a_real_tensorflow_start_up_prints_nothing_under_launch():
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("TF_CPP_MIN_LOG_LEVEL", "CUDA_VISIBLE_DEVICES", "TF_CONFIG")
        and not k.startswith("TFDIST_OPT_")
    }
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "tfdist_opt",
            "launch",
            "-n",
            "1",
            "--",
            sys.executable,
            "-c",
            _CODE,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert p.returncode == 0, p.stderr[-4000:]
    assert "[worker 0] sum 3.0" in p.stdout, p.stdout
    worker_lines = [
        ln
        for ln in (p.stdout + p.stderr).splitlines()
        if ln.startswith("[worker 0]") and ln != "[worker 0] sum 3.0"
    ]
    assert worker_lines == [], "\n".join(worker_lines)


# What TF 2.19.1 printed here at start-up, in TSL's older log format.
TSL_CUINIT = (
    "2026-12-06 13:32:31.984202: E external/local_xla/xla/stream_executor/"
    "cuda/cuda_platform.cc:51] failed call to cuInit: INTERNAL: CUDA error: "
    "Failed call to cuInit: UNKNOWN ERROR (303)"
)
TSL_CUFFT = (
    "2026-12-06 13:31:43.053489: E external/local_xla/xla/stream_executor/"
    "cuda/cuda_fft.cc:467] Unable to register cuFFT factory: Attempting to "
    "register factory for plugin cuFFT when one has already been registered"
)
TSL_INFO = (
    "2026-12-06 13:31:43.100000: I tensorflow/core/util/port.cc:153] oneDNN "
    "custom operations are on."
)
TSL_ERROR = (
    "2026-12-06 13:31:50.000000: E tensorflow/core/common_runtime/"
    "base_collective_executor.cc:249] BaseCollectiveExecutor::StartAbort"
)


def test_the_older_tensorflow_log_format_is_filtered_alike():
    from tfdist_opt.launch import log_filter

    keep = log_filter.StartupNoiseFilter(2, nvidia_driver=False)
    assert [ln for ln in (TSL_CUINIT, TSL_CUFFT, TSL_INFO, TSL_ERROR) if keep(ln)] == [TSL_ERROR]
    assert keep.hidden == 3
    with_driver = log_filter.StartupNoiseFilter(2, nvidia_driver=True)
    assert with_driver(TSL_CUINIT) and not with_driver(TSL_CUFFT)
    verbose = log_filter.StartupNoiseFilter(0, nvidia_driver=True)
    assert verbose(TSL_INFO)
