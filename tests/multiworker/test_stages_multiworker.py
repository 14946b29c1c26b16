"""A user-written gradient stage on 2 real workers (RING over 127.0.0.1).

scripts/topk_train.py trains docs/examples/topk_stage.py's TopK in one launch:
* k = 100% equals the plain hooked all-reduce bit for bit on both workers
  (the stage path adds nothing: fails if the chain drops or re-adds a stage,
  or if the residual is not subtracted);
* k = 25%: each worker's residual is non-zero and comes back exactly from a
  tf.train.Checkpoint and from a .keras file into a fresh model, and the
  continued weights EQUAL the uninterrupted run's, bit for bit (fails when
  the residual is saved as TF's ON_READ sum: each replica gets sum / n).
"""

import os

import numpy as np
import pytest

from tests.multiworker import harness

# Its processes run TensorFlow's graph optimizer, as users run (conftest.py).
pytestmark = pytest.mark.grappler

SCRIPT = os.path.join("tests", "multiworker", "scripts", "topk_train.py")


def _load(path):
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def _ws(d):
    return [d[f"w{i}"] for i in range(len([k for k in d if k.startswith("w")]))]


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    out = tmp_path_factory.mktemp("topk")
    results = harness.run_workers(2, [SCRIPT, "--out", str(out)], timeout_s=240)
    for r in results:
        assert r.returncode == 0 and "TOPK_DONE" in r.output, (
            f"worker {r.index}:\n{r.output[-4000:]}"
        )
    return out


@pytest.mark.multiworker
def test_full_k_equals_the_plain_all_reduce(out):
    plain = _ws(_load(out / "plain_0.npz"))
    for task in (0, 1):
        for a, b in zip(_ws(_load(out / f"full_{task}.npz")), plain):
            np.testing.assert_array_equal(a, b)


@pytest.mark.multiworker
def test_residual_is_checkpointed_and_resume_is_bit_for_bit(out):
    for task in (0, 1):
        whole = _ws(_load(out / f"whole_{task}.npz"))
        assert not all(np.array_equal(a, b) for a, b in zip(whole, _ws(_load(out / "plain_0.npz"))))
        for variant in ("resumed", "keras"):
            got = _load(out / f"{variant}_{task}.npz")
            assert int(got["count"]) == 4 and int(got["iterations"]) == 6, variant
            assert bool(got["res_nonzero"]) and bool(got["res_equal"]), variant
            for a, b in zip(_ws(got), whole):
                np.testing.assert_array_equal(a, b)
