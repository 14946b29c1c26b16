"""`tfdist-opt bench`: name -> binary, flags passed unchanged, clear errors."""

import sys

import pytest

from tfdist_opt.cli import bench as bench_cli
from tfdist_opt import cli


@pytest.mark.parametrize(
    "name,binary",
    [("train", "train.py"), ("allreduce", "allreduce.py"), ("input", "input_pipeline.py")],
)
def test_each_benchmark_maps_to_its_binary_with_the_same_flags(name, binary):
    cmd = bench_cli.command(name, ["--model=mlp", "--output_json=/tmp/x.json"], environ={})
    assert cmd[0] == sys.executable
    assert cmd[1].endswith("benchmarks/" + binary)
    assert cmd[2:] == ["--model=mlp", "--output_json=/tmp/x.json"]


def test_unknown_benchmark_lists_the_valid_names():
    with pytest.raises(
        ValueError,
        match=r"Unrecognized benchmark: 'nope'. "
        r"Expected one of: train, allreduce, input\.",
    ):
        bench_cli.command("nope", [], environ={})


def test_missing_benchmarks_dir_says_where_it_looked(tmp_path):
    missing = tmp_path / "gone"
    with pytest.raises(
        FileNotFoundError,
        match=f"benchmark binaries were not found. Received: {missing}.*pip install \\.",
    ):
        bench_cli.command("train", [], environ={bench_cli.BENCHMARKS_DIR_ENV: str(missing)})


def test_main_execs_the_binary(monkeypatch):
    seen = []
    monkeypatch.setattr(bench_cli, "_exec", lambda cmd: seen.append(cmd) or 0)
    assert cli.main(["bench", "train", "--compare=baseline"]) == 0
    assert seen[0][1].endswith("benchmarks/train.py")
    assert seen[0][2:] == ["--compare=baseline"]


def test_main_errors_and_usage(capsys, monkeypatch):
    monkeypatch.setattr(bench_cli, "_exec", lambda cmd: pytest.fail("ran"))
    assert bench_cli.main(["nope"]) == 2
    assert "Unrecognized benchmark: 'nope'" in capsys.readouterr().err
    assert bench_cli.main([]) == 2
    assert bench_cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "train" in out and "allreduce" in out and "input" in out


def test_the_benchmarks_dir_variable_is_not_taken_for_a_config_field():
    # The binary inherits it; StrategyConfig must not reject it as unknown.
    from tfdist_opt import StrategyConfig

    env = {bench_cli.BENCHMARKS_DIR_ENV: "/x", "TFDIST_OPT_ALL_REDUCE": "ring"}
    assert StrategyConfig.load(environ=env).all_reduce == "ring"
