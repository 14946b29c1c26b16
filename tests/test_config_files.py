"""One loader for StrategyConfig and PipelineOptions: files, presets, env."""

import json

import pytest

from tfdist_opt import config_files
from tfdist_opt.data.options import PipelineOptions
from tfdist_opt.strategy.config import StrategyConfig


def test_both_configs_read_presets_by_name():
    assert StrategyConfig.load("cpu_test", environ={}).cpu_replicas == 2
    assert isinstance(PipelineOptions.load("cpu_test", environ={}), PipelineOptions)


def test_both_configs_read_the_file_named_by_the_environment(tmp_path):
    f = tmp_path / "job.toml"
    f.write_text('[strategy]\nall_reduce = "ring"\n[data]\nseed = 7\n')
    env = {"TFDIST_OPT_CONFIG": str(f)}
    assert StrategyConfig.load(environ=env).all_reduce == "ring"
    assert PipelineOptions.load(environ=env).seed == 7


def test_data_env_layer_and_precedence(tmp_path):
    f = tmp_path / "job.json"
    f.write_text(json.dumps({"data": {"seed": 1, "prefetch": 3}}))
    env = {
        "TFDIST_OPT_DATA_SEED": "5",
        "TFDIST_OPT_DATA_SHUFFLE": "off",
        "TFDIST_OPT_DATA_SHUFFLE_BUFFER": "auto",
    }
    opts = PipelineOptions.load(f, environ=env, prefetch=None)
    assert (opts.seed, opts.prefetch, opts.shuffle) == (5, 3, False)
    assert PipelineOptions.load(f, environ=env, seed=9).seed == 9
    # The strategy layer does not mistake data variables for its own.
    assert StrategyConfig.load(environ=env).mode == "auto"


def test_unknown_data_variable_is_refused_with_the_valid_names():
    with pytest.raises(
        ValueError,
        match=r"Unknown environment variable TFDIST_OPT_DATA_SEDE='1'. Expected one of: TFDIST_OPT_DATA_SHARD_POLICY",
    ):
        PipelineOptions.load(environ={"TFDIST_OPT_DATA_SEDE": "1"})


def test_a_range_error_names_the_variable_that_set_it():
    with pytest.raises(
        ValueError,
        match=r"Received: num_packs=0 \(set by environment variable TFDIST_OPT_NUM_PACKS\)",
    ):
        StrategyConfig.load(environ={"TFDIST_OPT_NUM_PACKS": "0"})
    with pytest.raises(
        ValueError,
        match=r"Received: prefetch=-1 \(set by environment variable TFDIST_OPT_DATA_PREFETCH\)",
    ):
        PipelineOptions.load(environ={"TFDIST_OPT_DATA_PREFETCH": "-1"})


def test_a_range_error_names_the_file_that_set_it(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text("grad_accum = 0\n")
    with pytest.raises(ValueError, match=r"Received: grad_accum=0 \(set by config file .*c.toml\)"):
        StrategyConfig.load(f, environ={})


def test_a_section_that_is_not_a_table_is_named(tmp_path):
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"strategy": "ring"}))
    with pytest.raises(
        ValueError, match=r"c.json: `strategy` must be a table.*Received: strategy='ring'"
    ):
        StrategyConfig.load(f, environ={})
    f.write_text(json.dumps({"data": [1]}))
    with pytest.raises(ValueError, match=r"`data` must be a table"):
        PipelineOptions.load(f, environ={})


def test_a_binary_file_is_named(tmp_path):
    f = tmp_path / "c.toml"
    f.write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(ValueError, match=r"Invalid config file .*c.toml: not UTF-8 text"):
        StrategyConfig.load(f, environ={})


@pytest.mark.parametrize(
    "annotation,raw,expected",
    [
        ("int | str", "auto", "auto"),
        ("int | str", "12", 12),
        ("float | None", "none", None),
        ("float | None", "2.5", 2.5),
        ("bool | None", "", None),
        ("bool", "yes", True),
        ("str", " x ", "x"),
        ("int | None", "3", 3),
    ],
)
def test_env_values_parse_by_field_type(annotation, raw, expected):
    assert config_files.parse_env_value("V", "f", raw, annotation) == expected
