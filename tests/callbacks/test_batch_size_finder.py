"""BatchSizeFinder on 2 virtual replicas: injected OOM, throughput plateau."""

import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfdist_opt.callbacks import BatchSizeFinder
from tfdist_opt.callbacks import batch_size_finder as bsf


class InjectOOM(keras.layers.Layer):
    """Raises ResourceExhaustedError in the train step (at run time, inside the
    replica's forward pass, as a real allocation failure would) when the
    per-replica batch is >= `threshold`."""

    def __init__(self, threshold, **kwargs):
        super().__init__(**kwargs)
        self.threshold = threshold

    def call(self, x):
        def check(n):
            if int(n) >= self.threshold:
                raise tf.errors.ResourceExhaustedError(None, None, "injected OOM")
            return n

        n = tf.py_function(check, [tf.shape(x)[0]], tf.int32)
        return x + tf.cast(tf.ensure_shape(n, []) * 0, x.dtype)

    def compute_output_shape(self, shape):
        return shape


def model_fn(oom_from=None):
    def make():
        layers = [keras.Input((4,))]
        if oom_from is not None:
            layers.append(InjectOOM(oom_from))
        m = keras.Sequential(layers + [keras.layers.Dense(1)])
        m.compile("sgd", "mse")
        return m

    return make


_model = model_fn()


def dataset_fn(sleep=None):
    """Batches of `gbs`; sleep(gbs) seconds per batch."""

    def make(gbs):
        x = np.ones((gbs, 4), "float32")
        ds = tf.data.Dataset.from_tensors((x, x[:, :1])).repeat()
        if sleep is not None:
            delay = sleep(gbs)

            def wait(a):
                time.sleep(delay)
                return a

            ds = ds.map(
                lambda a, b: (tf.ensure_shape(tf.py_function(wait, [a], tf.float32), a.shape), b)
            )
        return ds

    return make


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(start=0), "start=0"),
        (dict(factor=1), "factor=1"),
        (dict(start=64, max_batch_size=8), "max_batch_size"),
        (dict(base_lr=0.1), "both"),
    ],
)
def test_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        BatchSizeFinder(**kwargs)


def test_candidates():
    assert BatchSizeFinder(start=8, factor=2, max_batch_size=70).candidates() == [8, 16, 32, 64]


def test_stops_on_injected_out_of_memory(strategy, capsys, monkeypatch):
    # About OOM only: throughput under load must not stop the search first.
    monkeypatch.setattr(bsf.stats, "plateau_reached", lambda t, r: False)
    finder = BatchSizeFinder(
        start=4,
        max_batch_size=256,
        steps_per_trial=2,
        warmup_steps=1,
        rel_tolerance=0.0,
        base_lr=0.1,
        base_batch_size=8,
    )
    result = finder.find(model_fn(oom_from=16), dataset_fn(), strategy)
    assert result.stop_reason == bsf.OUT_OF_MEMORY
    assert set(result.examples_per_sec) <= {4, 8}  # 16 (gbs 32) OOM
    assert 16 not in result.examples_per_sec
    assert result.global_batch_size == 2 * result.per_replica_batch_size
    assert result.learning_rate == pytest.approx(0.1 * result.global_batch_size / 8)
    assert "per-replica batch 16: out of memory" in capsys.readouterr().out


def test_stops_on_throughput_plateau(strategy):
    """Per-batch time max(40 ms, gbs * 0.5 ms): throughput doubles up to gbs 80
    (per-replica 40), then stays flat, so the finder stops at per-replica 80."""
    finder = BatchSizeFinder(
        start=10,
        max_batch_size=1280,
        steps_per_trial=3,
        warmup_steps=1,
        rel_tolerance=0.2,
        verbose=0,
    )
    result = finder.find(_model, dataset_fn(sleep=lambda gbs: max(0.04, gbs * 5e-4)), strategy)
    tried = result.examples_per_sec
    print("examples/sec by per-replica size:", tried)
    assert result.stop_reason == bsf.PLATEAU
    assert sorted(tried) == [10, 20, 40, 80]
    assert result.per_replica_batch_size in (40, 80)


def test_first_size_out_of_memory_is_an_error(strategy):
    finder = BatchSizeFinder(start=4, steps_per_trial=1, warmup_steps=0, verbose=0)
    with pytest.raises(RuntimeError, match="start=4"):
        finder.find(model_fn(oom_from=1), dataset_fn(), strategy)


def test_is_out_of_memory():
    assert bsf.is_out_of_memory(tf.errors.ResourceExhaustedError(None, None, "x"))
    assert bsf.is_out_of_memory(
        tf.errors.UnknownError(None, None, "(0) UNKNOWN: ResourceExhaustedError: injected OOM")
    )
    assert not bsf.is_out_of_memory(tf.errors.InvalidArgumentError(None, None, "shape"))
