"""Keras `fit`/`evaluate`/`predict`/save on 2 real workers equals one process.

Each test runs the same script (tests/multiworker/scripts/keras_train.py) as
one process with global batch 16 and as a 2-worker cluster on 127.0.0.1
(8 per worker), then compares; the two Keras 3 tests share one reference
process and one cluster (each trains both models in turn). Tolerance: rel 1e-5 — the only difference is
the order of float32 additions in the all-reduce (measured ~2e-7).
"""

import os

import numpy as np
import pytest

from tests.multiworker import harness

# `grappler`: its processes run TensorFlow's graph optimizer, as users run (conftest.py).
pytestmark = [pytest.mark.multiworker, pytest.mark.slow, pytest.mark.grappler]

SCRIPT = "tests/multiworker/scripts/keras_train.py"
RTOL = 1e-5


def _start_pair(tmp_path, runs, extra_args=(), extra_env=None):
    """One reference process and one 2-worker cluster, each training every
    run of `runs` ({name: keras_train.py --run options}) in turn."""

    def argv(role):
        return [
            SCRIPT,
            *extra_args,
            *(
                a
                for name, opts in runs.items()
                for a in ("--run", ",".join([str(tmp_path / role / name), *opts]))
            ),
        ]

    with harness.alongside(harness.run_single, argv("single"), extra_env=extra_env) as ref:
        results = harness.run_workers(2, argv("multi"), extra_env=extra_env)
    return tmp_path, ref.result(), results


def _load_pair(pair, name):
    tmp_path, ref, results = pair
    assert ref.returncode == 0, ref.output[-3000:]
    for r in results:
        assert r.returncode == 0, f"worker {r.index}:\n{r.output[-3000:]}"
    single_dir, multi_dir = tmp_path / "single" / name, tmp_path / "multi" / name
    load = lambda d, role: dict(np.load(os.path.join(d, role + ".npz")))
    return (load(single_dir, "single"), load(multi_dir, "worker0"), load(multi_dir, "worker1"))


@pytest.fixture(scope="module")
def keras3(tmp_path_factory):
    """The two Keras 3 runs share one reference process and one cluster."""
    return _start_pair(
        tmp_path_factory.mktemp("keras3"), {"plain": [], "dict": ["dict", "steps=3"]}
    )


def _assert_equal_training(single, w0, w1):
    assert int(single["replicas"]) == 1
    assert int(w0["replicas"]) == int(w1["replicas"]) == 2
    assert single["loss"][-1] < single["loss"][0], "loss must fall"
    weight_keys = sorted(k for k in single if k.startswith("w"))
    assert weight_keys
    for k in weight_keys:
        np.testing.assert_array_equal(w0[k], w1[k], err_msg=f"workers differ: {k}")
        np.testing.assert_allclose(
            w0[k], single[k], rtol=RTOL, atol=1e-6, err_msg=f"2 workers vs 1 process: {k}"
        )
    for key in ("loss", "val_loss", "val_accuracy"):
        np.testing.assert_allclose(w0[key], single[key], rtol=RTOL, err_msg=key)
        np.testing.assert_allclose(w1[key], single[key], rtol=RTOL, err_msg=key)
    for key in ("eval_loss", "eval_accuracy"):
        np.testing.assert_allclose(w0[key], single[key], rtol=RTOL)
        np.testing.assert_allclose(w1[key], single[key], rtol=RTOL)
    np.testing.assert_allclose(w0["predictions"], single["predictions"], rtol=RTOL, atol=1e-6)
    np.testing.assert_allclose(w1["predictions"], single["predictions"], rtol=RTOL, atol=1e-6)
    np.testing.assert_allclose(
        w0["reloaded_predictions"], single["predictions"], rtol=RTOL, atol=1e-6
    )


@pytest.mark.compat
def test_keras3_fit_two_workers_equals_one_process(keras3):
    _assert_equal_training(*_load_pair(keras3, "plain"))


def test_workers_on_one_host_split_its_cpus(keras3):
    """cpu_split="auto": each local worker's TF pools are sized to its share
    of the CPUs, unpinned (the reference process is not split)."""
    if any(os.environ.get(k) for k in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")):
        pytest.skip("TF_NUM_*_THREADS is set: the split keeps the user's pool sizes")
    _, w0, w1 = _load_pair(keras3, "plain")
    affinity = sorted(os.sched_getaffinity(0))
    size = max(1, len(affinity) // 2)
    expected = [(affinity, size, max(2, size))] * 2
    if affinity == [0, 1]:  # the 2-core CI host, literally
        assert expected == [([0, 1], 1, 2)] * 2
    got = [(w["cpus"].tolist(), int(w["intra_op"]), int(w["inter_op"])) for w in (w0, w1)]
    assert got == expected


@pytest.mark.compat
def test_keras3_dict_dataset_and_steps_per_epoch(keras3):
    _assert_equal_training(*_load_pair(keras3, "dict"))


@pytest.mark.compat
def test_tf_keras_two_workers_equals_one_process(tmp_path):
    _assert_equal_training(
        *_load_pair(
            _start_pair(
                tmp_path, {"legacy": []}, ["--legacy"], extra_env={"TF_USE_LEGACY_KERAS": "1"}
            ),
            "legacy",
        )
    )


def test_plain_mwms_fails_under_keras3_without_our_fix(tmp_path):
    """Proves the override is needed: the plain strategy cannot fit."""
    results = harness.run_workers(2, [SCRIPT, "--out", str(tmp_path), "--plain"], timeout_s=120)
    assert all(r.returncode not in (0, None) for r in results), [r.output[-2000:] for r in results]
    assert any("PerReplica" in r.output for r in results)
