"""ChiefTensorBoard and the comm/* scalars, in one process (2 virtual replicas)."""

import glob

import pytest
import tensorflow as tf

from tfdist_opt.callbacks import ChiefTensorBoard
from tfdist_opt.callbacks import CommunicationProfiler
from tfdist_opt.callbacks import ThroughputMonitor
from tfdist_opt.callbacks import _common
from tests.callbacks._models import dataset, model


def _tags(root):
    tags = set()
    for path in glob.glob(str(root / "**" / "events*"), recursive=True):
        for event in tf.compat.v1.train.summary_iterator(path):
            tags.update(v.tag for v in event.summary.value)
    return tags


def test_chief_writes_keras_tensorboard_and_comm_scalars(strategy, tmp_path):
    tb = tmp_path / "tb"
    prof = CommunicationProfiler(probe_steps=2, log_dir=str(tb), verbose=0)
    mon = ThroughputMonitor(8, log_dir=str(tb), summary_freq=2, verbose=0)
    model(strategy).fit(
        dataset(), epochs=2, verbose=0, callbacks=[mon, prof, ChiefTensorBoard(str(tb))]
    )
    assert {
        "comm/comm_fraction",
        "comm/comm_time",
        "comm/step_time",
        "throughput/examples_per_sec",
    } <= _tags(tb)
    # Ours share one event file per folder (two would interleave steps).
    assert len(glob.glob(str(tb / "events*"))) == 1
    assert {"epoch_loss", "epoch_comm_fraction"} <= _tags(tb / "train")


def test_non_chief_writes_no_files(strategy, tmp_path, monkeypatch):
    monkeypatch.setattr(_common, "is_chief", lambda: False)
    tb = tmp_path / "tb"
    hist = model(strategy).fit(
        dataset(),
        epochs=1,
        verbose=0,
        validation_data=dataset(16),
        callbacks=[
            CommunicationProfiler(probe_steps=2, log_dir=str(tb), verbose=0),
            ChiefTensorBoard(str(tb), histogram_freq=1),
        ],
    )
    assert "comm_fraction" in hist.history  # still measured and logged
    assert list(tmp_path.iterdir()) == []


def test_chief_tensorboard_is_still_a_log_reader_for_the_order_check(strategy, tmp_path):
    with pytest.raises(ValueError, match="CommunicationProfiler"):
        model(strategy).fit(
            dataset(),
            epochs=1,
            verbose=0,
            callbacks=[ChiefTensorBoard(str(tmp_path)), CommunicationProfiler(probe_steps=1)],
        )
