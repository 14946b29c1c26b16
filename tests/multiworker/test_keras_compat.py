"""Each `KerasMultiWorkerMirroredStrategy.reduce` fix, with and without it.

Runs 2 real workers; the plain upstream strategy must fail each Keras call
pattern (so the test proves the override is needed) and ours must return the
single-device value.
"""

import json

import pytest

from tests.multiworker import harness

pytestmark = pytest.mark.multiworker

SCRIPT = "tests/multiworker/scripts/reduce_cases.py"


def _cases(*args):
    results = harness.run_workers(2, [SCRIPT, *args], timeout_s=120)
    out = []
    for r in results:
        assert r.returncode == 0, r.output[-3000:]
        line = [l for l in r.output.splitlines() if l.startswith("RESULT ")][-1]
        out.append(json.loads(line[len("RESULT "):]))
    return out


def test_upstream_strategy_fails_keras_call_patterns():
    for cases in _cases("--plain"):
        assert cases["nest"].startswith("error:") and "PerReplica" in cases["nest"]
        assert cases["scalar_axis0"].startswith("error:")
        assert "Invalid reduction dimension" in cases["scalar_axis0"]


def test_our_strategy_reduces_like_a_single_device():
    for cases in _cases():
        assert cases["nest"] == [1.5, {"y": 1.5}]
        assert cases["scalar_axis0"] == 1.5
        assert cases["vector_axis0"] == 6.0  # TF semantics: sum over axis 0 and replicas
