"""`tfdist-opt info` on this machine.

`--json` runs as a real subprocess, as a user runs it (and
tests/test_install.py runs it from the installed wheel); the other cases call
the same CLI entry point in this process (`info` builds nothing and starts no
server), saving a TensorFlow start-up each.
"""

import json
import os
import re
import subprocess
import sys

import pytest

from tests.conftest import host_gpus
from tests.multiworker.harness import REPO_ROOT
from tfdist_opt import cli
from tfdist_opt.strategy.devices import cpu_split


def _info(*args, env_extra=None):
    env = {
        k: v for k, v in os.environ.items() if k != "TF_CONFIG" and not k.startswith("TFDIST_OPT_")
    }
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-m", "tfdist_opt", "info", *args],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def info_here(monkeypatch, capsys):
    """`tfdist-opt info ARGS` in this process with `env_extra` set: (code, stdout)."""

    def run(*args, env_extra=None):
        for k in list(os.environ):
            if k == "TF_CONFIG" or k.startswith("TFDIST_OPT_"):
                monkeypatch.delenv(k)
        for k, v in (env_extra or {}).items():
            monkeypatch.setenv(k, v)
        capsys.readouterr()
        code = cli.main(["info", *args])
        return code, capsys.readouterr().out

    return run


def _kind_for(gpus):
    # No TF_CONFIG: 2+ GPUs mirror over them, else one device (/gpu:0 or CPU).
    return "mirrored" if len(gpus) >= 2 else "one_device"


@pytest.mark.gpu
def test_info_json_on_this_machine():
    p = _info("--json")  # the same GPU visibility as this pytest run
    assert p.returncode == 0, p.stderr[-2000:]
    info = json.loads(p.stdout)
    assert info["tensorflow"].startswith("2.21")
    assert info["keras"].startswith("keras 3.")
    gpus = host_gpus()
    assert info["devices"]["GPU"] == gpus
    assert info["strategy"]["kind"] == _kind_for(gpus)
    assert info["tf_config_role"] is None
    assert any(p.endswith("cpu_test.json") for p in info["presets"])


def test_info_answers_without_tensorflow_startup_noise():
    """As a person runs it (no TF_CPP_MIN_LOG_LEVEL set): the answer, nothing else."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("TF_CONFIG", "TF_CPP_MIN_LOG_LEVEL") and not k.startswith("TFDIST_OPT_")
    }
    run = lambda *a: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "tfdist_opt", "info", *a],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=180,
    )
    p = run()
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stderr == "", p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith("tfdist_opt   : Python "), p.stdout
    assert all(re.match(r"^[a-zA-Z_ ]{13}: ", ln) for ln in lines), p.stdout
    # The level `info` set for its own quiet child is not one a launch forwards.
    forwards = [ln for ln in lines if ln.startswith("launch env   : ")]
    assert len(forwards) == 1 and "TF_CPP_MIN_LOG_LEVEL" not in forwards[0], p.stdout
    verbose = run("--verbose")  # everything TF prints, as `launch --verbose`
    assert verbose.returncode == 0 and verbose.stdout == p.stdout
    assert "absl::InitializeLog()" in verbose.stderr, verbose.stderr


def test_info_text_with_cluster_role_and_preset(info_here):
    cfg = {
        "cluster": {"worker": ["localhost:2222", "localhost:2223"]},
        "task": {"type": "worker", "index": 1},
    }
    code, out = info_here(
        "--config", "multi_worker_ring_cpu", env_extra={"TF_CONFIG": json.dumps(cfg)}
    )
    assert code == 0, out
    assert "TF_CONFIG    : worker:1 of 2 task(s)" in out
    assert "multi_worker over /cpu:0 (2 replica(s) in sync)" in out
    assert "collectives  : ring" in out
    # The preset's packs: no streamed pieces (collective_streams="auto").
    assert (
        "; gradients one collective per pack, in turn (collective_streams=0 with bytes_per_pack set)"
        in out
    )
    # Both workers on this host: what cpu_split does to this one.
    want = cpu_split.detect("auto", cfg).reason
    assert f"cpu threads  : {want} (cpu_split)" in out
    assert (
        "stalls       : a worker behind for 60 s is named with its stack, every "
        "60 s (stall_warn_s); never aborted (stall_abort_s off)"
    ) in out
    code, out = info_here(
        env_extra={
            "TF_CONFIG": json.dumps(cfg),
            "TFDIST_OPT_STALL_WARN_S": "20",
            "TFDIST_OPT_STALL_ABORT_S": "300",
        }
    )
    assert "abort after 300 s, exit code 43 (stall_abort_s)" in out


def test_info_says_the_gradients_travel_as_streamed_pieces(info_here):
    cfg = {
        "cluster": {"worker": ["localhost:2222", "localhost:2223"]},
        "task": {"type": "worker", "index": 0},
    }
    code, out = info_here(env_extra={"TF_CONFIG": json.dumps(cfg)})
    assert code == 0, out
    line = "ring (collective ops over gRPC); gradients in pieces of 2097152 bytes, 2 in flight"
    assert line in out
    code, out = info_here(
        env_extra={"TF_CONFIG": json.dumps(cfg), "TFDIST_OPT_COLLECTIVE_STREAMS": "0"}
    )
    assert code == 0, out
    assert "gradients one collective per pack, in turn (collective_streams=0)" in out


def test_info_names_the_variables_a_launch_forwards(info_here, monkeypatch):
    """The launcher's rule: TFDIST_OPT_* and TF_* but TF_CONFIG (env_forward)."""
    for k in list(os.environ):
        if k.startswith("TF_"):
            monkeypatch.delenv(k)
    cfg = {"cluster": {"worker": ["localhost:2222"]}, "task": {"type": "worker", "index": 0}}
    code, out = info_here(
        env_extra={
            "TF_CONFIG": json.dumps(cfg),
            "TFDIST_OPT_STALL_WARN_S": "20",
            "TF_CPP_MIN_LOG_LEVEL": "1",
            "TFX_NOT_FORWARDED": "1",
        }
    )
    assert code == 0, out
    assert (
        "launch env   : forwards TFDIST_OPT_STALL_WARN_S, TF_CPP_MIN_LOG_LEVEL to every "
        "task (TFDIST_OPT_* and TF_* but TF_CONFIG; --env NAME[=VALUE] adds more)"
    ) in out, out
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL")
    code, out = info_here()
    assert "launch env   : none set here to forward (" in out, out


@pytest.mark.gpu
@pytest.mark.parametrize("n", [0, 1, 2])
def test_info_follows_the_gpu_list(info_here, fake_gpus, n):
    """The GPU branch without a GPU: `info` only plans, from the device list."""
    gpus = fake_gpus(n)
    code, out = info_here("--json")
    assert code == 0, out
    info = json.loads(out)
    assert info["devices"]["GPU"] == gpus
    assert info["strategy"]["kind"] == _kind_for(gpus)
    assert info["strategy"]["devices"] == ([f"/gpu:{i}" for i in range(n)] if n else ["/cpu:0"])


@pytest.mark.gpu
@pytest.mark.parametrize("n", [0, 2])
def test_info_reports_bad_config_and_fails(info_here, fake_gpus, n):
    # all_reduce=nccl is refused without a GPU, and is what 2 GPUs use.
    fake_gpus(n)
    code, out = info_here(
        env_extra={"TFDIST_OPT_ALL_REDUCE": "nccl", "TFDIST_OPT_CPU_REPLICAS": "2"}
    )
    if n:
        assert code == 0, out
        assert "collectives  : nccl" in out
    else:
        assert code == 1
        assert "NCCL needs GPUs" in out


def test_cli_usage_and_unknown_command():
    p = subprocess.run(
        [sys.executable, "-m", "tfdist_opt", "frobnicate"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2
    assert "unrecognized command 'frobnicate'" in p.stderr
    assert "info" in p.stderr and "launch" in p.stderr


def test_info_explains_parameter_server_partitioning(info_here):
    cfg = {
        "cluster": {
            "chief": ["localhost:2222"],
            "worker": ["localhost:2223"],
            "ps": ["localhost:2224", "localhost:2225"],
        },
        "task": {"type": "ps", "index": 1},
    }
    code, out = info_here(
        env_extra={"TF_CONFIG": json.dumps(cfg), "TFDIST_OPT_PS_MIN_SHARD_BYTES": "1048576"}
    )
    assert code == 0, out
    assert "strategy     : parameter_server: 1 worker(s) step asynchronously" in out
    assert "this task    : ps:1: serves until the chief finishes" in out
    assert (
        "partitioning : variables of >= 2097152 bytes cut into shards of >= "
        "1048576 bytes, at most 2 shards"
    ) in out


def test_info_prints_the_gradient_plan(info_here):
    """The path, its stages in order, and why: `StrategyPlan.gradients`, printed."""
    from tfdist_opt.gradients import gradient_plan

    cfg = {
        "cluster": {"worker": ["localhost:2222", "localhost:2223"]},
        "task": {"type": "worker", "index": 0},
    }
    code, out = info_here(
        env_extra={
            "TF_CONFIG": json.dumps(cfg),
            "TFDIST_OPT_GRAD_ACCUM": "2",
            "TFDIST_OPT_COMPRESSION": "bf16",
        }
    )
    assert code == 0, out
    lines = out.splitlines()
    assert f"grad path    : accumulation: {gradient_plan.PATHS['accumulation']}" in lines
    assert (
        "grad stages  : Accumulate (accumulate) -> Cast (wire, lossy) -> AllReduce (collective)"
        in lines
    )
    assert (
        "grad why     : hooked (hooked=True, compression='bf16', grad_accum=2); "
        "multi-worker with Keras 3: the update is fused; collective_streams=auto: 0, "
        "grad_accum=2 runs its own collectives"
    ) in lines
    code, out = info_here()  # one device, the defaults: not hooked, no stages
    assert code == 0, out
    assert f"grad path    : tf: {gradient_plan.PATHS['tf']}" in out
    assert "grad stages  :" not in out


def test_info_json_holds_the_gradient_plan(monkeypatch):
    from tfdist_opt.cli import info
    from tfdist_opt.strategy import config as config_lib
    from tfdist_opt.strategy import plan as plan_lib
    from tfdist_opt.strategy import topology as topology_lib

    monkeypatch.delenv("TF_CONFIG", raising=False)
    monkeypatch.setenv("TFDIST_OPT_SHARD_OPTIMIZER_STATE", "1")
    monkeypatch.setenv("TFDIST_OPT_CPU_REPLICAS", "2")
    got = info.collect()["gradients"]
    want = plan_lib.plan_strategy(
        config_lib.StrategyConfig.load(), topology_lib.detect_topology()
    ).gradients
    assert got == want.to_dict()
    assert got["path"] == "zero" and got["stages"][-1] == "ZeRO (update)"
    json.dumps(got)
