"""PipelineOptions validation and loading; sources and record counting."""

import dataclasses
import json
import struct

import numpy as np
import pytest

from tfdist_opt.data import options as options_lib
from tfdist_opt.data import sources
from tfdist_opt.data.options import PipelineOptions


def test_defaults_are_valid_and_frozen():
    opts = PipelineOptions()
    assert opts.shard_policy == "auto" and opts.cache_kind == "none"
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.seed = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    "field,value,expected",
    [
        ("shard_policy", "files", "one of 'auto'"),
        ("uneven", "pad", "one of 'drop', 'error'"),
        ("shuffle", 1, "a bool"),
        ("shuffle_buffer", 0, "'auto' or an int >= 1"),
        ("seed", -1, "an int >= 0"),
        ("cache", "", "'none', 'memory' or a file path prefix"),
        ("num_parallel_calls", 0, "'autotune' or an int >= 1"),
        ("prefetch", -1, "'autotune' or an int >= 0"),
        ("device_prefetch", "autotune", "'auto' or an int >= 1"),
        ("private_threadpool_size", -1, "an int >= 0"),
        ("autotune_ram_budget", 1.5, "an int >= 0"),
        ("deterministic", "yes", "a bool"),
    ],
)
def test_bad_values_name_field_value_and_expectation(field, value, expected):
    with pytest.raises(ValueError) as info:
        PipelineOptions(**{field: value})
    text = str(info.value)
    assert f"`{field}`" in text and f"{field}={value!r}" in text
    assert expected in text


def test_cache_kinds():
    assert PipelineOptions(cache="memory").cache_kind == "memory"
    assert PipelineOptions(cache="/tmp/c").cache_kind == "file"


def test_load_file_then_overrides(tmp_path):
    path = tmp_path / "cfg.json"
    path.write_text(
        json.dumps({"strategy": {"all_reduce": "ring"}, "data": {"seed": 4, "cache": "memory"}})
    )
    opts = PipelineOptions.load(path, cache=None, prefetch=2)
    assert (opts.seed, opts.cache, opts.prefetch) == (4, "memory", 2)
    toml = tmp_path / "cfg.toml"
    toml.write_text("[data]\nshuffle = false\n")
    assert PipelineOptions.load(toml).shuffle is False


def test_unknown_fields_are_refused(tmp_path):
    with pytest.raises(ValueError, match="Unknown PipelineOptions field.*bogus"):
        PipelineOptions.load(bogus=1)
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"data": {"sed": 1}}))
    with pytest.raises(ValueError, match="sed"):
        PipelineOptions.load(path)
    assert options_lib.read_data_section(path) == {"sed": 1}


def test_as_source_dispatch():
    assert isinstance(sources.as_source("a/*.tfrecord"), sources.TFRecordSource)
    assert sources.as_source(["a", "b"]).pattern == ("a", "b")
    x = np.zeros((4, 2))
    assert isinstance(sources.as_source(x), sources.ArraySource)
    assert isinstance(sources.as_source((x, x[:, 0])), sources.ArraySource)
    assert isinstance(sources.as_source({"x": x}), sources.ArraySource)
    assert isinstance(sources.as_source(lambda ctx: None), sources.DatasetFnSource)
    with pytest.raises(TypeError, match="Unrecognized source.*Received: int"):
        sources.as_source(3)


def test_array_source_rows_and_lengths():
    x, y = np.arange(10), np.arange(10) * 2
    src = sources.ArraySource((x, {"y": y}))
    assert src.num_examples == 10
    rows = src.rows(1, 3)
    assert rows[0].tolist() == [1, 4, 7] and rows[1]["y"].tolist() == [2, 8, 14]
    with pytest.raises(ValueError, match=r"lengths \[3, 4\]"):
        sources.ArraySource((np.zeros(3), np.zeros(4)))


def test_tfds_and_tfrecord_source_validation():
    with pytest.raises(ValueError, match="compression_type='LZ4'"):
        sources.TFRecordSource("x", compression_type="LZ4")
    assert sources.TFDSSource("mnist").download is False  # never by default


def _record(payload: bytes) -> bytes:
    # Length, CRC of length, data, CRC of data (CRCs are not checked here).
    return struct.pack("<Q", len(payload)) + b"\0" * 4 + payload + b"\0" * 4


def test_count_tfrecords_seeks_over_payloads(tmp_path):
    path = tmp_path / "r.tfrecord"
    path.write_bytes(b"".join(_record(b"x" * n) for n in (0, 5, 1000)))
    assert sources.count_tfrecords(path) == 3
    (tmp_path / "empty").write_bytes(b"")
    assert sources.count_tfrecords(tmp_path / "empty") == 0
    path.write_bytes(_record(b"abc")[:-2])
    with pytest.raises(ValueError, match="runs past the end"):
        sources.count_tfrecords(path)
