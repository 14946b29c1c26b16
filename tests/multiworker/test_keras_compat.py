"""Each `KerasMultiWorkerMirroredStrategy.reduce` fix, with and without it.

Runs 2 real workers (one cluster for the module); the plain upstream `reduce`
(called on the same strategy instance, i.e. without our override) must fail
each Keras call pattern (so the test proves the override is needed) and ours
must return the single-device value.
"""

import json

import pytest

from tests.multiworker import harness

pytestmark = pytest.mark.multiworker

SCRIPT = "tests/multiworker/scripts/reduce_cases.py"


@pytest.fixture(scope="module")
def results():
    return harness.run_workers(2, [SCRIPT], timeout_s=120)


def _cases(results, which):
    out = []
    for r in results:
        assert r.returncode == 0, r.output[-3000:]
        line = [l for l in r.output.splitlines() if l.startswith("RESULT ")][-1]
        out.append(json.loads(line[len("RESULT ") :])[which])
    return out


def test_upstream_strategy_fails_keras_call_patterns(results):
    for cases in _cases(results, "plain"):
        assert cases["nest"].startswith("error:") and "PerReplica" in cases["nest"]
        assert cases["scalar_axis0"].startswith("error:")
        assert "Invalid reduction dimension" in cases["scalar_axis0"]


def test_our_strategy_reduces_like_a_single_device(results):
    for cases in _cases(results, "ours"):
        assert cases["nest"] == [1.5, {"y": 1.5}]
        assert cases["scalar_axis0"] == 1.5
        assert cases["vector_axis0"] == 6.0  # TF semantics: sum over axis 0 and replicas
