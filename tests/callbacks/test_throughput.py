"""ThroughputMonitor on 2 virtual replicas."""

import glob
import json
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfdist_opt.callbacks import ThroughputMonitor
from tfdist_opt.callbacks import _common
from tests.callbacks._models import GLOBAL_BATCH, dataset, model

KEYS = ("examples_per_sec", "examples_per_sec_per_replica", "step_time_median", "step_time_p90")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(global_batch_size=0), "global_batch_size=0"),
        (dict(global_batch_size=8, window=0), "window=0"),
        (dict(global_batch_size=8, warmup_steps=-1), "warmup_steps=-1"),
    ],
)
def test_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ThroughputMonitor(**kwargs)


def test_values_in_logs_history_tensorboard_and_json(strategy, tmp_path, capsys):
    m = model(strategy)
    seen = []
    spy = keras.callbacks.LambdaCallback(on_train_batch_end=lambda b, logs: seen.append(dict(logs)))
    mon = ThroughputMonitor(
        GLOBAL_BATCH,
        window=4,
        warmup_steps=2,
        log_dir=str(tmp_path / "tb"),
        summary_freq=2,
        json_path=str(tmp_path / "t.json"),
    )
    hist = m.fit(dataset(), epochs=2, verbose=0, callbacks=[mon, spy])
    # Not in logs during warm-up, then every batch.
    assert not any(k in seen[0] for k in KEYS) and not any(k in seen[1] for k in KEYS)
    assert all(all(k in s for k in KEYS) for s in seen[2:])
    for k in KEYS:
        assert len(hist.history[k]) == 2 and all(v > 0 for v in hist.history[k])
    assert hist.history["examples_per_sec_per_replica"][0] == pytest.approx(
        hist.history["examples_per_sec"][0] / 2
    )
    summary = mon.summary()
    assert summary["steps_timed"] == 16 - 2 and summary["num_replicas"] == 2
    assert json.loads((tmp_path / "t.json").read_text()) == pytest.approx(summary)
    tags = set()
    for path in glob.glob(str(tmp_path / "tb" / "*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            tags.update(v.tag for v in event.summary.value)
    assert tags == {"throughput/" + k for k in KEYS}
    out = capsys.readouterr().out
    assert out.count("ThroughputMonitor epoch") == 2 and "summary" in out


def test_non_chief_prints_and_writes_nothing(strategy, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(_common, "is_chief", lambda: False)
    mon = ThroughputMonitor(
        GLOBAL_BATCH, log_dir=str(tmp_path / "tb"), json_path=str(tmp_path / "t.json")
    )
    hist = model(strategy).fit(dataset(), epochs=1, verbose=0, callbacks=[mon])
    assert "examples_per_sec" in hist.history  # still measured and logged
    assert capsys.readouterr().out == ""
    assert list(tmp_path.iterdir()) == []


def test_agrees_with_wall_clock_within_10_percent(strategy):
    """Independent figure: examples / one `time.time()` interval from the first
    batch's start to the last batch's end, stamped by a plain LambdaCallback
    that never reads a tensor, versus the monitor's sum of per-step
    `perf_counter` intervals cut at forced step completion. `fit`'s one-off
    set-up before the first batch and its epoch-end / tear-down work
    (metrics read-out, iterator teardown, ~0.1-0.6 s here) are outside both:
    they are not training steps. Steps ~20 ms."""
    keras.utils.set_random_seed(0)
    with strategy.scope():
        m = keras.Sequential(
            [
                keras.Input((256,)),
                keras.layers.Dense(1024, "relu"),
                keras.layers.Dense(1024, "relu"),
                keras.layers.Dense(1),
            ]
        )
        m.compile("sgd", "mse")
    batch, steps = 256, 30
    x = np.random.rand(batch * steps, 256).astype("float32")
    ds = tf.data.Dataset.from_tensor_slices((x, x[:, :1])).batch(batch).cache()
    m.fit(ds.take(3), epochs=1, verbose=0)  # trace + warm caches
    list(ds)  # fill the cache
    first, last = [], []
    stamp = keras.callbacks.LambdaCallback(
        on_train_batch_begin=lambda b, logs: first.append(time.time()),
        on_train_batch_end=lambda b, logs: last.append(time.time()),
    )
    mon = ThroughputMonitor(batch, warmup_steps=0, verbose=0)
    m.fit(ds, epochs=1, verbose=0, callbacks=[mon, stamp])
    wall = last[-1] - first[0]
    independent = batch * steps / wall
    measured = mon.summary()["examples_per_sec"]
    print(
        f"ThroughputMonitor {measured:.0f} vs wall clock {independent:.0f} "
        f"examples/sec ({measured / independent - 1:+.1%})"
    )
    assert measured == pytest.approx(independent, rel=0.10)


def test_order_error_names_what_to_move(strategy):
    csv = keras.callbacks.CSVLogger("/dev/null")
    with pytest.raises(ValueError, match="Move ThroughputMonitor before CSVLogger"):
        model(strategy).fit(
            dataset(), epochs=1, verbose=0, callbacks=[csv, ThroughputMonitor(GLOBAL_BATCH)]
        )
