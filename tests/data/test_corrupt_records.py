"""A corrupt TFRecord names its file; `corrupt_records="skip"` skips and reports it."""

import os
import re
import struct

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.data.records import parse_id
from tests.data.records import write_id_records
from tfdist_opt.data import pipeline
from tfdist_opt.data import sources
from tfdist_opt.data.options import PipelineOptions


def _corrupt_payload(path, record):
    """Flips one payload byte of record `record` (its CRC no longer matches)."""
    data = bytearray(open(path, "rb").read())
    pos = 0
    for _ in range(record):
        (length,) = struct.unpack("<Q", data[pos : pos + 8])
        pos += 12 + length + 4
    data[pos + 12 + 2] ^= 0xFF
    open(path, "wb").write(bytes(data))


@pytest.fixture()
def files(tmp_path):
    paths = write_id_records(str(tmp_path), [8, 8, 8])  # ids 0..23
    _corrupt_payload(paths[1], 2)  # ids 10..15 unreadable
    return paths


def _ids(dataset):
    return sorted(int(i) for batch in dataset for i in np.asarray(batch).reshape(-1))


def _one_worker(source, options, batch=4):
    ctx = tf.distribute.InputContext(
        num_input_pipelines=1, input_pipeline_id=0, num_replicas_in_sync=1
    )
    ds, _ = pipeline.worker_dataset(source, ctx, batch, map_fn=parse_id, options=options)
    return ds


def test_a_corrupt_record_fails_naming_its_file(files, tmp_path):
    ds = _one_worker(str(tmp_path / "*.tfrecord"), PipelineOptions(shuffle=False))
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=re.escape(files[1]) + r".*read\]? \[?2\]? \[?of\]? \[?8",
    ):
        _ids(ds)


def test_fit_on_a_corrupt_file_fails_naming_it(files, tmp_path):
    ds = pipeline.build_dataset(
        str(tmp_path / "*.tfrecord"),
        tf.distribute.get_strategy(),
        4,
        map_fn=lambda r: (tf.cast(tf.reshape(parse_id(r), [1]), tf.float32),) * 2,
        options=PipelineOptions(shuffle=False),
    )
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(files[1])):
        model.fit(ds, epochs=1, verbose=0)


def test_a_truncated_file_with_stated_counts_names_it(tmp_path):
    paths = write_id_records(str(tmp_path), [8, 8])
    with open(paths[0], "r+b") as f:  # cut inside record 5
        f.truncate(os.path.getsize(paths[0]) * 5 // 8 + 3)
    source = sources.TFRecordSource(str(tmp_path / "*.tfrecord"), examples_per_file=(8, 8))
    with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(paths[0])):
        _ids(_one_worker(source, PipelineOptions(shuffle=False)))


def test_skip_drops_the_rest_of_the_file_reports_it_and_fills_the_epoch(files, tmp_path, capfd):
    ds = _one_worker(
        str(tmp_path / "*.tfrecord"), PipelineOptions(shuffle=False, corrupt_records="skip")
    )
    ids = _ids(ds)
    assert len(ids) == 24  # the planned 6 steps of 4, filled ...
    assert set(ids) == set(range(10)) | set(range(16, 24))  # ... ids 10..15 skipped
    assert len(set(ids)) == 18  # 6 records again, from a second pass
    err = capfd.readouterr().err
    assert re.search(r"skipped 6 of 8 record\(s\) of \"?" + re.escape(files[1]), err), err


def test_skip_keeps_steps_equal_on_every_worker(files, tmp_path):
    steps = []
    for i in range(2):
        ctx = tf.distribute.InputContext(
            num_input_pipelines=2, input_pipeline_id=i, num_replicas_in_sync=2
        )
        ds, plan = pipeline.worker_dataset(
            str(tmp_path / "*.tfrecord"),
            ctx,
            4,
            map_fn=parse_id,
            options=PipelineOptions(shard_policy="data", shuffle=False, corrupt_records="skip"),
        )
        steps.append((sum(1 for _ in ds), plan.steps_per_epoch))
    assert steps == [(6, 6), (6, 6)]


def test_healthy_files_read_every_record_once(tmp_path):
    write_id_records(str(tmp_path), [8, 8, 8])
    for mode in ("error", "skip"):
        ds = _one_worker(
            str(tmp_path / "*.tfrecord"), PipelineOptions(shuffle=False, corrupt_records=mode)
        )
        assert _ids(ds) == list(range(24)), mode


def test_corrupt_records_option_is_validated():
    with pytest.raises(
        ValueError,
        match=r"Invalid value for `corrupt_records`: "
        r"expected one of 'error', 'skip'. Received: "
        r"corrupt_records='ignore'",
    ):
        PipelineOptions(corrupt_records="ignore")
