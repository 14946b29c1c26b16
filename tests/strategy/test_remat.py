"""Recomputed activations (`keras.RematScope`) in `fit` under our strategies.

The memory guard runs benchmarks/remat.py (small: 16 residual blocks) in a
fresh process, with TensorFlow's BFC allocator on the CPU so the step's
peak bytes are known, on 2 virtual CPU replicas: the remat run's step peak
must stay <= 0.6 of the plain run's (goal 0.5; measured 0.40 at this size)
with the same weights after the same steps. With `--noremat` (both models
plain) the ratio was 0.99 and the test failed. Bytes, not time.
"""

import json

import keras
import numpy as np
import pytest

import tfdist_opt
from tests.multiworker import harness


@pytest.mark.slow
def test_remat_blocks_halve_the_step_peak_with_equal_weights(tmp_path):
    flags = ["--blocks=16", "--width=64", "--batch_size=1024", "--steps=3", "--rounds=1"]
    # The two replicas' steps interleave as the host's load lets them, and
    # the peak with them (a loaded CI run once measured 0.92, quiet runs
    # 0.28-0.39): up to 2 fresh runs, the guard holds when one of them is
    # <= 0.6. With remat gone every run reads ~0.99.
    for attempt in range(2):
        out = tmp_path / f"remat{attempt}.json"
        # A fresh interpreter: the allocator is chosen when TensorFlow starts.
        r = harness.run_single(
            ["benchmarks/remat.py", *flags, f"--output_json={out}"], timeout_s=300, warm=False
        )
        assert r.returncode == 0, r.output[-3000:]
        summary = json.loads(out.read_text())["summary"]
        print(summary)
        assert summary["memory_source"] == "tf_bfc_allocator"
        assert summary["replicas"] == 2
        assert summary["weights_max_rel_diff"] <= 1e-6, summary
        if summary["step_peak_ratio"] <= 0.6:
            break
    assert summary["step_peak_ratio"] <= 0.6, summary


class _DropoutBlock(keras.layers.Layer):
    """A residual block whose call takes `training` (as blocks with dropout do)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.hidden = keras.layers.Dense(32, activation="relu")
        self.drop = keras.layers.Dropout(0.0)
        self.out = keras.layers.Dense(8)

    def call(self, x, training=None):
        return x + self.out(self.drop(self.hidden(x), training=training))


def _fit(remat):
    names = ["b0", "b1"]
    with tfdist_opt.opt_strategy(cpu_replicas=2).scope():
        keras.utils.set_random_seed(1)
        x = inputs = keras.Input((8,))
        for name in names:
            scope = keras.RematScope(mode="list_of_layers", layer_names=names if remat else [])
            with scope:
                x = _DropoutBlock(name=name)(x)
        model = keras.Model(inputs, keras.layers.Dense(1)(x))
        model.compile(keras.optimizers.Adam(0.01), "mse")
    rng = np.random.default_rng(0)
    data = rng.normal(size=(16, 8)).astype("float32"), rng.normal(size=(16, 1)).astype("float32")
    model.fit(*data, batch_size=8, epochs=2, verbose=0)
    return model, model.evaluate(*data, verbose=0), model.predict(data[0], verbose=0)


def test_remat_block_called_with_training_trains_like_plain():
    # Without remat_calls: "The custom_gradient decorator currently supports
    # keywords arguments only when eager execution is enabled" at the first step.
    model, loss, pred = _fit(remat=True)
    plain, plain_loss, plain_pred = _fit(remat=False)
    assert type(model.get_layer("b0")).__mro__[1].__name__ == "KeywordRemat"
    for got, want in zip(model.get_weights(), plain.get_weights()):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert loss == pytest.approx(plain_loss, rel=1e-6)
    np.testing.assert_allclose(pred, plain_pred, rtol=1e-6, atol=1e-7)
