"""CommunicationProfiler on 2 virtual replicas."""

import json
import statistics
import time

import keras
import pytest

from tfdist_opt.callbacks import CommunicationProfiler
from tfdist_opt.callbacks import _common
from tests.callbacks._models import dataset, model


def test_rejects_bad_arguments():
    with pytest.raises(ValueError, match="probe_steps=0"):
        CommunicationProfiler(probe_steps=0)


def test_comm_fraction_in_logs_and_trace(strategy, tmp_path, capsys):
    prof = CommunicationProfiler(probe_steps=5, trace_path=str(tmp_path / "t.json"))
    seen = []
    spy = keras.callbacks.LambdaCallback(on_train_batch_end=lambda b, logs: seen.append(dict(logs)))
    start = time.perf_counter()
    hist = model(strategy).fit(dataset(), epochs=2, verbose=0, callbacks=[prof, spy])
    fit_wall = time.perf_counter() - start
    frac = hist.history["comm_fraction"]
    assert len(frac) == 2 and all(0 < f <= 1 for f in frac)
    assert "comm_fraction" not in seen[1] and "comm_fraction" in seen[2]  # warm-up 2
    trace = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    names = {e["name"] for e in trace}
    assert {"allreduce_probe", "train_step", "host_gap", "gradient_all_reduce (estimated)"} <= names
    assert sum(e["name"] == "train_step" for e in trace) == 16

    def durs(name):  # seconds, in trace order
        return [e["dur"] * 1e-6 for e in trace if e["name"] == name]

    # The reported figures are the trace's durations: comm_time the median
    # probe, step_time the median step after the 2 warm-up steps (epoch 1:
    # steps 3-8; at the end: 3-16), the fraction their ratio.
    probe, steps = durs("allreduce_probe"), durs("train_step")
    assert len(probe) == 5 and 0 < prof.comm_time
    assert prof.comm_time == pytest.approx(statistics.median(probe), rel=1e-5)
    assert prof.step_time == pytest.approx(statistics.median(steps[2:]), rel=1e-6)
    for f, counted in ((frac[0], steps[2:8]), (frac[1], steps[2:])):
        assert f == pytest.approx(
            min(1.0, statistics.median(probe) / statistics.median(counted)), rel=1e-5
        )
    est = durs("gradient_all_reduce (estimated)")
    assert est == pytest.approx([min(prof.comm_time, s) for s in steps], abs=1e-9)
    # The trace is one clock: probes, steps and the gaps between them fit in
    # the fit call as timed here (no bound on how long anything takes).
    assert sum(probe) + sum(steps) + sum(durs("host_gap")) <= fit_wall
    assert all(e["ph"] == "X" and e["dur"] >= 0 for e in trace)
    assert "CommunicationProfiler epoch 2: comm_fraction" in capsys.readouterr().out


def test_bigger_gradients_take_longer_to_reduce(strategy):
    """The probe follows the gradient size (8x4 vs 2048x4 + 2048x2048 weights)."""
    small = CommunicationProfiler(probe_steps=7, verbose=0)
    model(strategy, width=8).fit(dataset(16), epochs=1, verbose=0, callbacks=[small])
    big = CommunicationProfiler(probe_steps=7, verbose=0)
    keras.utils.set_random_seed(0)
    with strategy.scope():
        m = keras.Sequential(
            [
                keras.Input((4,)),
                keras.layers.Dense(2048),
                keras.layers.Dense(2048),
                keras.layers.Dense(1),
            ]
        )
        m.compile("sgd", "mse")
    m.fit(dataset(16), epochs=1, verbose=0, callbacks=[big])
    print(
        f"all-reduce small {small.comm_time * 1e3:.3f} ms, big (16 MiB) "
        f"{big.comm_time * 1e3:.3f} ms"
    )
    assert big.comm_time > 2 * small.comm_time


def test_non_chief_silent_and_writes_no_trace(strategy, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(_common, "is_chief", lambda: False)
    prof = CommunicationProfiler(probe_steps=2, trace_path=str(tmp_path / "t.json"))
    hist = model(strategy).fit(dataset(), epochs=1, verbose=0, callbacks=[prof])
    assert "comm_fraction" in hist.history
    assert capsys.readouterr().out == "" and list(tmp_path.iterdir()) == []
