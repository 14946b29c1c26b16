"""What TensorFlow's placer actually did (not only what the graph asked for).

Reads `tf.debugging.set_log_device_placement` output of one micro-batched
fit step in a subprocess: every forward and backward MatMul of stage s0 ran
on CPU:1 and of stage s1 on CPU:2 (plain `tf.device` would leave the
`gradient_tape/...` ones on CPU:0).
"""

import os
import re

import pytest

from tests.multiworker.harness import REPO_ROOT
from tests.multiworker.harness import run_single

SCRIPT = os.path.join(REPO_ROOT, "tests", "model_parallel", "placer_log_script.py")
LINE = re.compile(r"(\S*(s[01])_\d+/MatMul\S*): \(MatMul\): \S*device:CPU:(\d)")


@pytest.mark.slow
def test_placer_puts_both_directions_on_the_stage_device():
    r = run_single([SCRIPT], timeout_s=180, extra_env={"TF_CPP_MIN_LOG_LEVEL": "0"})
    assert r.returncode == 0 and "FIT_DONE" in r.output, r.output[-3000:]
    placed = {m.group(1): (m.group(2), m.group(3)) for m in LINE.finditer(r.output)}
    backward = [name for name in placed if "gradient_tape/" in name]
    # 2 micro-batches x 2 stages: 4 forward and 8 backward MatMuls.
    assert len(placed) == 12 and len(backward) == 8, sorted(placed)
    for name, (stage, device) in placed.items():
        assert device == {"s0": "1", "s1": "2"}[stage], (name, device)
