"""`tfdist-opt info` on this machine (a real subprocess, as a user runs it)."""

import json
import os
import subprocess
import sys

from tests.multiworker.harness import REPO_ROOT


def _info(*args, env_extra=None):
    env = {k: v for k, v in os.environ.items()
           if k != "TF_CONFIG" and not k.startswith("TFDIST_OPT_")}
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "tfdist_opt", "info", *args],
                          env=env, cwd=REPO_ROOT, capture_output=True, text=True,
                          timeout=120)


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


def test_info_text_with_cluster_role_and_preset():
    cfg = {"cluster": {"worker": ["localhost:2222", "localhost:2223"]},
           "task": {"type": "worker", "index": 1}}
    p = _info("--config", "multi_worker_ring_cpu",
              env_extra={"TF_CONFIG": json.dumps(cfg)})
    assert p.returncode == 0, p.stderr[-2000:]
    assert "TF_CONFIG    : worker:1 of 2 task(s)" in p.stdout
    assert "multi_worker over /cpu:0 (2 replica(s) in sync)" in p.stdout
    assert "collectives  : ring" in p.stdout


def test_info_reports_bad_config_and_fails():
    p = _info(env_extra={"TFDIST_OPT_ALL_REDUCE": "nccl", "TFDIST_OPT_CPU_REPLICAS": "2"})
    assert p.returncode == 1
    assert "NCCL needs GPUs" in p.stdout


def test_cli_usage_and_unknown_command():
    p = subprocess.run([sys.executable, "-m", "tfdist_opt", "frobnicate"],
                       cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert "unrecognized command 'frobnicate'" in p.stderr
    assert "info" in p.stderr and "launch" in p.stderr


def test_info_explains_parameter_server_partitioning():
    cfg = {"cluster": {"chief": ["localhost:2222"], "worker": ["localhost:2223"],
                       "ps": ["localhost:2224", "localhost:2225"]},
           "task": {"type": "ps", "index": 1}}
    p = _info(env_extra={"TF_CONFIG": json.dumps(cfg),
                         "TFDIST_OPT_PS_MIN_SHARD_BYTES": "1048576"})
    assert p.returncode == 0, p.stderr[-2000:]
    assert "strategy     : parameter_server: 1 worker(s) step asynchronously" in p.stdout
    assert "this task    : ps:1: serves until the chief finishes" in p.stdout
    assert ("partitioning : variables of >= 2097152 bytes cut into shards of >= "
            "1048576 bytes, at most 2 shards") in p.stdout
