"""`tfdist-opt info` on this machine.

`--json` runs as a real subprocess, as a user runs it (and
tests/test_install.py runs it from the installed wheel); the other cases call
the same CLI entry point in this process (`info` builds nothing and starts no
server), saving a TensorFlow start-up each.
"""

import json
import os
import subprocess
import sys

import pytest

from tests.multiworker.harness import REPO_ROOT
from tfdist_opt import cli
from tfdist_opt.strategy import cpu_split


def _info(*args, env_extra=None):
    env = {k: v for k, v in os.environ.items()
           if k != "TF_CONFIG" and not k.startswith("TFDIST_OPT_")}
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "tfdist_opt", "info", *args],
                          env=env, cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=120)


@pytest.fixture
def info_here(monkeypatch, capsys):
    """`tfdist-opt info ARGS` in this process with `env_extra` set: (code, stdout)."""
    def run(*args, env_extra=None):
        for k in list(os.environ):
            if k == "TF_CONFIG" or k.startswith("TFDIST_OPT_"):
                monkeypatch.delenv(k)
        # `info` setdefaults TF_CPP_MIN_LOG_LEVEL: set it here so it is restored.
        monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", os.environ.get("TF_CPP_MIN_LOG_LEVEL", "2"))
        for k, v in (env_extra or {}).items():
            monkeypatch.setenv(k, v)
        capsys.readouterr()
        code = cli.main(["info", *args])
        return code, capsys.readouterr().out
    return run


def test_info_json_on_this_machine():
    p = _info("--json")
    assert p.returncode == 0, p.stderr[-2000:]
    info = json.loads(p.stdout)
    assert info["tensorflow"].startswith("2.21")
    assert info["keras"].startswith("keras 3.")
    assert info["devices"]["GPU"] == []
    assert info["strategy"]["kind"] == "one_device"
    assert info["tf_config_role"] is None
    assert any(p.endswith("cpu_test.json") for p in info["presets"])


def test_info_text_with_cluster_role_and_preset(info_here):
    cfg = {"cluster": {"worker": ["localhost:2222", "localhost:2223"]},
           "task": {"type": "worker", "index": 1}}
    code, out = info_here("--config", "multi_worker_ring_cpu",
                          env_extra={"TF_CONFIG": json.dumps(cfg)})
    assert code == 0, out
    assert "TF_CONFIG    : worker:1 of 2 task(s)" in out
    assert "multi_worker over /cpu:0 (2 replica(s) in sync)" in out
    assert "collectives  : ring" in out
    # Both workers on this host: what cpu_split does to this one.
    want = cpu_split.detect("auto", cfg).reason
    assert f"cpu threads  : {want} (cpu_split)" in out
    assert ("stalls       : a worker behind for 60 s is named with its stack, every "
            "60 s (stall_warn_s); never aborted (stall_abort_s off)") in out
    code, out = info_here(env_extra={"TF_CONFIG": json.dumps(cfg),
                                     "TFDIST_OPT_STALL_WARN_S": "20",
                                     "TFDIST_OPT_STALL_ABORT_S": "300"})
    assert "abort after 300 s, exit code 43 (stall_abort_s)" in out


def test_info_reports_bad_config_and_fails(info_here):
    code, out = info_here(env_extra={"TFDIST_OPT_ALL_REDUCE": "nccl",
                                     "TFDIST_OPT_CPU_REPLICAS": "2"})
    assert code == 1
    assert "NCCL needs GPUs" in out


def test_cli_usage_and_unknown_command():
    p = subprocess.run([sys.executable, "-m", "tfdist_opt", "frobnicate"],
                       cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert "unrecognized command 'frobnicate'" in p.stderr
    assert "info" in p.stderr and "launch" in p.stderr


def test_info_explains_parameter_server_partitioning(info_here):
    cfg = {"cluster": {"chief": ["localhost:2222"], "worker": ["localhost:2223"],
                       "ps": ["localhost:2224", "localhost:2225"]},
           "task": {"type": "ps", "index": 1}}
    code, out = info_here(env_extra={"TF_CONFIG": json.dumps(cfg),
                                     "TFDIST_OPT_PS_MIN_SHARD_BYTES": "1048576"})
    assert code == 0, out
    assert "strategy     : parameter_server: 1 worker(s) step asynchronously" in out
    assert "this task    : ps:1: serves until the chief finishes" in out
    assert ("partitioning : variables of >= 2097152 bytes cut into shards of >= "
            "1048576 bytes, at most 2 shards") in out
