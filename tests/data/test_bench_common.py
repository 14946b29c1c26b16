"""benchmarks/common.py: timing statistics and chief-only reports."""

import csv
import json
import sys

import pytest

from benchmarks import common

WORKER1 = {
    "TF_CONFIG": json.dumps(
        {
            "cluster": {"worker": ["localhost:1", "localhost:2"]},
            "task": {"type": "worker", "index": 1},
        }
    )
}


def test_summarize_median_spread_jitter_and_warmup():
    # 2 warm-up steps (slow), then rates 100, 100, 200, 50, 100 items/sec.
    durations = [5.0, 3.0, 1.0, 1.0, 0.5, 2.0, 1.0]
    stats = common.summarize(durations, items_per_step=100, warmup=2)
    assert stats.steps == 5
    assert stats.median == 100
    assert stats.jitter == 0.0  # MAD of [100,100,200,50,100] is 0
    assert stats.mean == pytest.approx(500 / 5.5)
    assert stats.spread == pytest.approx(1.2533 * 54.77225575 / 5**0.5)
    assert stats.format() == "images/sec: 100.0 +/- 30.7 (jitter = 0.0)"
    assert stats.format("examples/sec").startswith("examples/sec: 100.0 +/- ")
    assert stats.to_dict("x_")["x_median"] == 100


def test_summarize_errors():
    with pytest.raises(ValueError, match=r"no step left after warm-up.*warmup=3"):
        common.summarize([1.0, 1.0], 10, warmup=3)
    with pytest.raises(ValueError, match="positive durations"):
        common.summarize([0.0], 10)


def test_time_steps_excludes_warmup():
    ticks = iter(range(100))
    calls = []
    durations = common.time_steps(
        lambda: calls.append(1), steps=3, warmup=2, clock=lambda: next(ticks)
    )
    assert len(calls) == 5 and durations == [1, 1, 1]


def test_write_report_shape_csv_on_chief(tmp_path):
    rows = [{"pipeline": "naive", "median": 1.0}, {"pipeline": "opt", "median": 2.0, "extra": 3}]
    out, table = tmp_path / "r" / "out.json", tmp_path / "out.csv"
    report = common.write_report(
        "demo",
        {"a": 1},
        rows,
        {"speedup": 2.0},
        output_json=str(out),
        csv_path=str(table),
        environ={},
    )
    written = json.loads(out.read_text())
    assert list(written) == [
        "benchmark",
        "config",
        "environment",
        "provenance",
        "results",
        "summary",
    ]
    assert written == json.loads(json.dumps(report))
    assert written["summary"] == {"speedup": 2.0}
    assert {"tf", "keras", "devices", "workers"} <= set(written["environment"])
    with open(table) as f:
        got = list(csv.DictReader(f))
    assert got[0] == {"pipeline": "naive", "median": "1.0", "extra": ""}
    assert got[1]["extra"] == "3"


def test_non_chief_writes_nothing(tmp_path):
    out = tmp_path / "out.json"
    report = common.write_report("demo", {}, [], {"x": 1}, output_json=str(out), environ=WORKER1)
    assert report["summary"] == {"x": 1}
    assert not out.exists()
    assert common.is_chief(WORKER1) is False and common.is_chief({}) is True


def test_plot_without_matplotlib_says_how_to_fix(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    spec = common.PlotSpec(x="pipeline", ys=("median",))
    with pytest.raises(ImportError, match="--plot needs matplotlib.*pip install"):
        common.write_report(
            "demo",
            {},
            [{"pipeline": "a", "median": 1}],
            {},
            plot_path=str(tmp_path / "p.png"),
            plot=spec,
            environ={},
        )
    with pytest.raises(ValueError, match="needs a `plot` PlotSpec"):
        common.write_report("demo", {}, [], {}, plot_path="x.png", environ={})


def test_plot_writes_png_when_matplotlib_exists(tmp_path):
    pytest.importorskip("matplotlib")
    path = tmp_path / "p.png"
    common.plot_results(
        str(path), [{"x": "a", "y": 1}, {"x": "b", "y": 2}], common.PlotSpec(x="x", ys=("y",))
    )
    assert path.read_bytes()[:4] == b"\x89PNG"


def test_flag_config_reports_this_modules_flags():
    from absl import flags

    was_parsed = flags.FLAGS.is_parsed()
    flags.FLAGS(["prog"], known_only=True)
    try:
        config = common.flag_config()
    finally:
        if not was_parsed:
            flags.FLAGS.unparse_flags()
    assert {"output_json", "csv", "plot"} <= set(config)
