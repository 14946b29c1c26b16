"""StrategyConfig: defaults, loading, precedence and every validation error."""

import json

import pytest

from tfdist_opt.strategy import config as config_lib
from tfdist_opt.strategy.config import StrategyConfig


def test_defaults():
    cfg = StrategyConfig()
    assert cfg.mode == "auto" and cfg.all_reduce == "auto"
    assert cfg.gpu_memory_growth is True and cfg.mixed_precision == "off"
    assert cfg.grad_accum == 1 and cfg.compression == "none"


def test_compression_auto_is_opt_in_from_keywords_env_and_files(tmp_path):
    assert StrategyConfig().compression == "none"
    assert StrategyConfig(compression="auto").compression == "auto"
    env = {"TFDIST_OPT_COMPRESSION": "auto"}
    assert StrategyConfig.from_env(env).compression == "auto"
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"compression": "auto"}))
    assert StrategyConfig.load(path, environ={}).compression == "auto"
    # With sharded optimizer state too (PowerSGD is then no candidate).
    assert StrategyConfig(compression="auto", shard_optimizer_state=True).compression == "auto"
    with pytest.raises(ValueError, match=r"TFDIST_OPT_COMPRESSION.*|Received: compression='Auto'"):
        StrategyConfig.from_env({"TFDIST_OPT_COMPRESSION": "Auto"})


def test_frozen():
    with pytest.raises(Exception):
        StrategyConfig().mode = "mirrored"


@pytest.mark.parametrize(
    "field,value,match",
    [
        (
            "mode",
            "tpu",
            r"Invalid value for `mode`: expected one of 'auto', 'one_device', 'mirrored', 'multi_worker', 'parameter_server'. Received: mode='tpu'",
        ),
        ("all_reduce", "gloo", r"`all_reduce`.*Received: all_reduce='gloo'"),
        (
            "bytes_per_pack",
            -1,
            r"`bytes_per_pack`: expected a non-negative int or \"auto\". Received: bytes_per_pack=-1",
        ),
        ("bytes_per_pack", "big", r"Received: bytes_per_pack='big'"),
        ("bytes_per_pack", 1.5, r"Received: bytes_per_pack=1.5"),
        ("num_packs", 0, r"`num_packs`: expected a positive int. Received: num_packs=0"),
        ("collective_timeout_s", 0, r"`collective_timeout_s`.*Received: collective_timeout_s=0"),
        ("collective_timeout_s", "10", r"Received: collective_timeout_s='10'"),
        ("cpu_replicas", -2, r"`cpu_replicas`: expected an int >= 0. Received: cpu_replicas=-2"),
        ("cpu_replicas", True, r"Received: cpu_replicas=True"),
        (
            "gpu_memory_growth",
            "yes",
            r"`gpu_memory_growth`: expected a bool. Received: gpu_memory_growth='yes'",
        ),
        (
            "mixed_precision",
            "fp16",
            r"`mixed_precision`.*'mixed_float16'.*Received: mixed_precision='fp16'",
        ),
        ("jit_compile", 1, r"`jit_compile`: expected a bool. Received: jit_compile=1"),
        (
            "compression",
            "int8",
            r"`compression`: expected one of 'none', 'fp16', 'bf16', 'powersgd', 'auto'. "
            r"Received: compression='int8'",
        ),
        ("grad_accum", 0, r"`grad_accum`: expected a positive int. Received: grad_accum=0"),
        (
            "ps_min_shard_bytes",
            0,
            r"`ps_min_shard_bytes`: expected a positive int. Received: ps_min_shard_bytes=0",
        ),
        ("ps_max_shards", -1, r"`ps_max_shards`: expected an int >= 0. Received: ps_max_shards=-1"),
        (
            "stall_warn_s",
            -1,
            r"`stall_warn_s`: expected a positive number of seconds, or 0 or None \(off\). Received: stall_warn_s=-1",
        ),
        ("stall_warn_s", "60", r"Received: stall_warn_s='60'"),
        (
            "stall_abort_s",
            float("inf"),
            r"`stall_abort_s`: expected a positive number.*Received: stall_abort_s=inf",
        ),
        (
            "stall_abort_s",
            30,
            r"`stall_abort_s`: expected a number of seconds >= stall_warn_s \(60\), or 0 or None \(off\). Received: stall_abort_s=30",
        ),
    ],
)
def test_every_field_validated(field, value, match):
    with pytest.raises(ValueError, match=match):
        StrategyConfig(**{field: value})


def test_stall_fields_defaults_env_and_off():
    cfg = StrategyConfig()
    assert (cfg.stall_warn_s, cfg.stall_abort_s) == (60.0, None)
    cfg = StrategyConfig.from_env({"TFDIST_OPT_STALL_WARN_S": "3", "TFDIST_OPT_STALL_ABORT_S": "8"})
    assert (cfg.stall_warn_s, cfg.stall_abort_s) == (3.0, 8.0)
    assert StrategyConfig.from_env({"TFDIST_OPT_STALL_WARN_S": "none"}).stall_warn_s is None
    assert StrategyConfig(stall_warn_s=0).stall_warn_s == 0
    with pytest.raises(
        ValueError,
        match=r"`stall_abort_s`: the abort needs the stall "
        r"inspector, and stall_warn_s=0.0 turns it off. Received: "
        r"stall_abort_s=5.*\(set by environment variable "
        r"TFDIST_OPT_STALL_ABORT_S\)",
    ):
        StrategyConfig.load(
            environ={"TFDIST_OPT_STALL_WARN_S": "0", "TFDIST_OPT_STALL_ABORT_S": "5"}
        )
    # The stall inspector's thread checks collective_timeout_s: it needs it on.
    with pytest.raises(
        ValueError,
        match=r"`collective_timeout_s`: the timeout is checked "
        r"by the stall inspector's thread, and stall_warn_s=0 turns it "
        r"off. Received: collective_timeout_s=30",
    ):
        StrategyConfig(collective_timeout_s=30, stall_warn_s=0)
    assert StrategyConfig(collective_timeout_s=30, stall_warn_s=5).collective_timeout_s == 30
    with pytest.raises(ValueError, match=r"Received: TFDIST_OPT_STALL_WARN_S='soon'"):
        StrategyConfig.load(environ={"TFDIST_OPT_STALL_WARN_S": "soon"})


def test_unknown_keyword_listed():
    with pytest.raises(
        ValueError,
        match=r"Unknown StrategyConfig field\(s\) in keyword arguments: packs. Expected one of: mode,",
    ):
        StrategyConfig.load(environ={}, packs=2)


def test_json_and_toml_files(tmp_path):
    j = tmp_path / "c.json"
    j.write_text(json.dumps({"all_reduce": "ring", "bytes_per_pack": 4194304}))
    t = tmp_path / "c.toml"
    t.write_text('description = "x"\n[strategy]\nmode = "mirrored"\ncpu_replicas = 2\n')
    assert StrategyConfig.from_file(j).bytes_per_pack == 4194304
    cfg = StrategyConfig.from_file(t)
    assert (cfg.mode, cfg.cpu_replicas) == ("mirrored", 2)


def test_bad_files(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"mode": "auto",}')
    with pytest.raises(ValueError, match=r"not valid JSON .* line 1 column 17"):
        StrategyConfig.from_file(bad)
    unknown = tmp_path / "u.json"
    unknown.write_text('{"modes": "auto"}')
    with pytest.raises(
        ValueError, match=r"Unknown StrategyConfig field\(s\) in config file .*u.json: modes"
    ):
        StrategyConfig.from_file(unknown)
    yaml = tmp_path / "c.yaml"
    yaml.write_text("mode: auto")
    with pytest.raises(ValueError, match=r"unsupported extension. Received: .*c.yaml"):
        StrategyConfig.from_file(yaml)
    with pytest.raises(ValueError, match=r"no such file or preset. Received: nope"):
        StrategyConfig.from_file("nope")
    value = tmp_path / "v.toml"
    value.write_text("num_packs = -3\n")
    with pytest.raises(ValueError, match=r"Received: num_packs=-3"):
        StrategyConfig.from_file(value)


def test_env_parsing():
    env = {
        "TFDIST_OPT_ALL_REDUCE": "ring",
        "TFDIST_OPT_CPU_REPLICAS": "2",
        "TFDIST_OPT_GPU_MEMORY_GROWTH": "off",
        "TFDIST_OPT_BYTES_PER_PACK": "auto",
        "TFDIST_OPT_COLLECTIVE_TIMEOUT_S": "30",
        "OTHER": "x",
    }
    cfg = StrategyConfig.from_env(env)
    assert cfg.all_reduce == "ring" and cfg.cpu_replicas == 2
    assert cfg.gpu_memory_growth is False and cfg.bytes_per_pack == "auto"
    assert cfg.collective_timeout_s == 30.0


@pytest.mark.parametrize(
    "env,match",
    [
        (
            {"TFDIST_OPT_CPU_REPLICAS": "two"},
            r"`cpu_replicas` \(from TFDIST_OPT_CPU_REPLICAS\): expected an integer. Received: TFDIST_OPT_CPU_REPLICAS='two'",
        ),
        (
            {"TFDIST_OPT_JIT_COMPILE": "maybe"},
            r"expected a boolean .* Received: TFDIST_OPT_JIT_COMPILE='maybe'",
        ),
        (
            {"TFDIST_OPT_COLLECTIVE_TIMEOUT_S": "soon"},
            r"Received: TFDIST_OPT_COLLECTIVE_TIMEOUT_S='soon'",
        ),
        (
            {"TFDIST_OPT_ALLREDUCE": "ring"},
            r"Unknown environment variable TFDIST_OPT_ALLREDUCE='ring'. Expected one of: TFDIST_OPT_MODE",
        ),
        ({"TFDIST_OPT_MODE": "gpu"}, r"Received: mode='gpu'"),
    ],
)
def test_env_errors(env, match):
    with pytest.raises(ValueError, match=match):
        StrategyConfig.load(environ=env)


def test_precedence_defaults_file_env_kwargs(tmp_path):
    f = tmp_path / "c.json"
    f.write_text(json.dumps({"all_reduce": "ring", "num_packs": 2, "cpu_replicas": 2}))
    env = {"TFDIST_OPT_NUM_PACKS": "3", "TFDIST_OPT_CPU_REPLICAS": "4"}
    cfg = StrategyConfig.load(f, environ=env, cpu_replicas=8, mode=None)
    assert cfg.all_reduce == "ring"  # file over default
    assert cfg.num_packs == 3  # env over file
    assert cfg.cpu_replicas == 8  # kwarg over env
    assert cfg.mode == "auto"  # None kwarg = unset
    assert cfg.mixed_precision == "off"  # default


def test_config_file_from_env(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text('all_reduce = "ring"\n')
    cfg = StrategyConfig.load(environ={"TFDIST_OPT_CONFIG": str(f)})
    assert cfg.all_reduce == "ring"


def test_presets_all_load():
    presets = config_lib.list_presets()
    assert {p.stem for p in presets} >= {
        "single_host_nccl",
        "multi_worker_nccl",
        "multi_worker_ring_cpu",
        "cpu_test",
    }
    for p in presets:
        StrategyConfig.from_file(p)
    assert StrategyConfig.from_file("cpu_test").cpu_replicas == 2


def test_replace_validates():
    with pytest.raises(ValueError, match="Received: grad_accum=-1"):
        StrategyConfig().replace(grad_accum=-1)


def test_file_with_strategy_and_data_sections(tmp_path):
    f = tmp_path / "job.toml"
    f.write_text('[strategy]\nall_reduce = "ring"\n[data]\nseed = 3\n')
    assert StrategyConfig.from_file(f).all_reduce == "ring"
    flat = tmp_path / "flat.toml"
    flat.write_text('all_reduce = "ring"\n[data]\nseed = 3\n')
    assert StrategyConfig.from_file(flat).all_reduce == "ring"
