"""PowerSGD on 2 real workers (RING over 127.0.0.1): one cluster, three properties.

scripts/powersgd_train.py trains every variant in one launch:
* full rank (rank 8 >= min(n, m) of every matrix, C=0, start step 2, SGD with
  momentum) equals uncompressed training to rel 1e-5 and both workers hold
  identical weights (fails without the Q all-reduce: each worker would apply
  its own projection);
* rank 1: sum of applied updates + residual (error buffers, summed over all
  replicas) == sum of the true gradients (fails without error feedback);
* resume: a tf.train.Checkpoint and a .keras file taken after 3 of 6 steps
  and restored into a fresh model + optimizer give each worker back its own
  residual and the Q factors exactly, and the continued weights EQUAL the
  uninterrupted run's, bit for bit (fails when the error buffers are saved
  as their sum, TF's ON_READ SUM default: each replica gets sum / n).
"""

import os

import numpy as np
import pytest

from tests.multiworker import harness

# Its processes run TensorFlow's graph optimizer, as users run (conftest.py).
pytestmark = pytest.mark.grappler

SCRIPT = os.path.join("tests", "multiworker", "scripts", "powersgd_train.py")


def _load(path):
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def _ws(d):
    return [d[f"w{i}"] for i in range(len([k for k in d if k.startswith("w")]))]


def _max_rel(a, b):
    return max(float(np.abs(x - y).max() / (np.abs(y).max() + 1e-30)) for x, y in zip(a, b))


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    out = tmp_path_factory.mktemp("powersgd")
    results = harness.run_workers(2, [SCRIPT, "--out", str(out)], timeout_s=240)
    for r in results:
        assert r.returncode == 0 and "POWERSGD_DONE" in r.output, (
            f"worker {r.index}:\n{r.output[-4000:]}"
        )
    return out


@pytest.mark.compat
@pytest.mark.multiworker
def test_full_rank_equals_uncompressed(out):
    plain = _ws(_load(out / "plain_0.npz"))
    for task in (0, 1):
        assert _max_rel(_ws(_load(out / f"full_{task}.npz")), plain) <= 1e-5
    for a, b in zip(_ws(_load(out / "full_0.npz")), _ws(_load(out / "full_1.npz"))):
        np.testing.assert_array_equal(a, b)


@pytest.mark.multiworker
def test_updates_plus_residual_equal_sum_of_gradients(out):
    script = {}
    exec(compile(open(os.path.join(harness.REPO_ROOT, SCRIPT)).read(), SCRIPT, "exec"), script)
    x, y = script["linear_data"](5)
    true = x.T @ y / (script["B"] * script["OUT_LIN"])
    for task in (0, 1):
        got = _load(out / f"linear_{task}.npz")
        assert np.abs(got["residual"]).max() > 1e-3 * np.abs(true).max()
        np.testing.assert_allclose(got["applied"] + got["residual"], true, rtol=1e-5, atol=1e-6)


@pytest.mark.multiworker
def test_checkpoint_resume_is_bit_for_bit(out):
    for task in (0, 1):
        whole = _ws(_load(out / f"whole_{task}.npz"))
        for variant in ("resumed", "keras"):
            resumed = _load(out / f"{variant}_{task}.npz")
            assert bool(resumed["q_equal"]) and int(resumed["iterations"]) == 6
            assert bool(resumed["err_nonzero"]) and bool(resumed["err_equal"]), variant
            for a, b in zip(_ws(resumed), whole):
                np.testing.assert_array_equal(a, b)
