"""`tfdist-opt tf-config` through the dispatcher, in process (no TF needed)."""

import json
import re
import shlex
import socket

import pytest

from tfdist_opt import cli
from tfdist_opt.cluster import tf_config as tc


def _run(capsys, *argv):
    code = cli.main(["tf-config", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_prints_that_workers_tf_config_as_json(capsys):
    code, out, _ = _run(capsys, "--workers", "h1:2222,h2:2222", "--index", "1")
    assert code == 0
    assert json.loads(out) == {
        "cluster": {"worker": ["h1:2222", "h2:2222"]},
        "task": {"type": "worker", "index": 1},
    }


def test_env_format_is_a_shell_export_line(capsys):
    code, out, _ = _run(capsys, "--workers", "h1:2222,h2:2222", "--index", "0", "--format", "env")
    assert code == 0
    words = shlex.split(out)
    assert words[0] == "export"
    name, value = words[1].split("=", 1)
    assert name == "TF_CONFIG"
    assert tc.parse_tf_config(value)["task"] == {"type": "worker", "index": 0}


def test_other_roles(capsys):
    code, out, _ = _run(
        capsys,
        "--workers",
        "w0:1,w1:1",
        "--chief",
        "c:1",
        "--ps",
        "p0:1,p1:1",
        "--evaluator",
        "e:1",
        "--task-type",
        "ps",
        "--index",
        "1",
    )
    assert code == 0
    cfg = json.loads(out)
    assert cfg["cluster"] == {
        "chief": ["c:1"],
        "worker": ["w0:1", "w1:1"],
        "ps": ["p0:1", "p1:1"],
        "evaluator": ["e:1"],
    }
    assert cfg["task"] == {"type": "ps", "index": 1}
    code, out, _ = _run(capsys, "--workers", "w0:1", "--chief", "c:1", "--task-type", "chief")
    assert json.loads(out)["task"] == {"type": "chief", "index": 0}


def test_out_dir_writes_one_file_per_task(capsys, tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node1 slots=2\nnode2 slots=1\n")
    code, out, _ = _run(
        capsys,
        "--hostfile",
        str(hostfile),
        "--chief",
        "head:2222",
        "--out-dir",
        str(tmp_path / "cfg"),
    )
    assert code == 0
    names = sorted(p.name for p in (tmp_path / "cfg").iterdir())
    assert names == ["chief-0.json", "worker-0.json", "worker-1.json", "worker-2.json"]
    cfg = tc.tf_config_from_file(tmp_path / "cfg" / "worker-1.json")
    assert cfg["cluster"]["worker"] == ["node1:2222", "node1:2223", "node2:2222"]
    assert cfg["task"]["index"] == 1
    assert "node1:2223" in out
    code, _, _ = _run(
        capsys, "--workers", "a:1,b:1", "--format", "env", "--out-dir", str(tmp_path / "env")
    )
    assert (tmp_path / "env" / "worker-1.env").read_text().startswith("export TF_CONFIG=")


def test_out_dir_never_follows_a_planted_symlink(capsys, tmp_path):
    out_dir, target = tmp_path / "cfg", tmp_path / "precious"
    out_dir.mkdir()
    target.write_text("keep me\n")
    (out_dir / "worker-0.json").symlink_to(target)
    code, out, err = _run(capsys, "--workers", "a:1,b:1", "--out-dir", str(out_dir))
    assert code == 2 and out == ""
    assert f"Refusing to write {out_dir}/worker-0.json: it is a symbolic link" in err
    assert target.read_text() == "keep me\n"  # target untouched
    assert sorted(p.name for p in out_dir.iterdir()) == ["worker-0.json"]  # nothing written
    (out_dir / "worker-0.json").unlink()
    (out_dir / "worker-1.json").write_text("old")  # a plain file is replaced
    code, _, _ = _run(capsys, "--workers", "a:1,b:1", "--out-dir", str(out_dir))
    assert code == 0
    assert tc.tf_config_from_file(out_dir / "worker-1.json")["task"]["index"] == 1
    assert sorted(p.name for p in out_dir.iterdir()) == ["worker-0.json", "worker-1.json"]


def test_slurm_source_takes_index_from_procid(capsys, monkeypatch):
    for k, v in {
        "SLURM_JOB_ID": "7",
        "SLURM_JOB_NODELIST": "node[01-04,07]",
        "SLURM_NTASKS": "5",
        "SLURM_TASKS_PER_NODE": "1(x5)",
        "SLURM_PROCID": "4",
    }.items():
        monkeypatch.setenv(k, v)
    code, out, _ = _run(capsys, "--slurm", "--port", "3000")
    assert code == 0
    cfg = json.loads(out)
    assert cfg["cluster"]["worker"] == [f"node0{i}:3000" for i in (1, 2, 3, 4, 7)]
    assert cfg["task"]["index"] == 4


def test_k8s_source_takes_index_from_hostname(capsys, monkeypatch):
    monkeypatch.setenv("HOSTNAME", "trainer-1")
    code, out, _ = _run(capsys, "--k8s", "trainer.trainer-svc:2222", "--replicas", "2")
    assert code == 0
    assert json.loads(out) == {
        "cluster": {"worker": ["trainer-0.trainer-svc:2222", "trainer-1.trainer-svc:2222"]},
        "task": {"type": "worker", "index": 1},
    }


def test_local_source(capsys):
    code, out, _ = _run(capsys, "--local", "2", "--index", "0")
    assert code == 0
    assert all(a.startswith("localhost:") for a in json.loads(out)["cluster"]["worker"])


@pytest.mark.parametrize(
    "argv,match",
    [
        (["--workers", "h1:2222,h2:2222"], "Missing `--index`"),
        (
            ["--workers", "h1:2222,h2:2222", "--index", "2"],
            "`task.index` must be in \\[0, 2\\).*Received: task.index=2",
        ),
        (["--workers", "h1:2222,h1:2222", "--index", "0"], "duplicates"),
        (["--workers", "localhost:2222,h2:2222", "--index", "0"], "loopback"),
        (["--workers", "h1,h2", "--port", "0", "--index", "0"], "needs a port"),
        (["--index", "0"], "No cluster given"),
        (["--k8s", "t.svc:1"], "Missing `--replicas`"),
        (
            ["--workers", "a:1", "--replicas", "2", "--index", "0"],
            "`--replicas` only applies to --k8s",
        ),
    ],
)
def test_errors_exit_2_with_message(capsys, argv, match):
    code, out, err = _run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert err.startswith("tfdist-opt tf-config: error:")
    assert re.search(match, err), err


def test_public_address_warns_on_stderr(capsys):
    code, out, err = _run(capsys, "--workers", "8.8.8.8:2222,10.0.0.2:2222", "--index", "1")
    assert code == 0 and json.loads(out)
    assert "warning: TF_CONFIG: cluster.worker[0]='8.8.8.8:2222' is a public" in err


def test_check_environment_and_file(capsys, monkeypatch, tmp_path):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    code, out, _ = _run(capsys, "--check")
    assert code == 0 and "not set" in out
    monkeypatch.setenv(
        "TF_CONFIG", '{"cluster": {"worker": ["h1:1"]}, "task": {"type": "worker", "index": 3}}'
    )
    code, _, err = _run(capsys, "--check")
    assert code == 1
    assert "TF_CONFIG (from environment): field `task.index`" in err
    bad = tmp_path / "tf.json"
    bad.write_text('{"cluster": {"worker": ["h1:1"]}, "task": }')
    code, _, err = _run(capsys, "--check", str(bad))
    assert code == 1
    assert f"TF_CONFIG (from file {bad}): malformed JSON" in err
    assert "char 42" in err


def test_check_reports_own_port_in_use_within_seconds(capsys, monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        monkeypatch.setenv(
            "TF_CONFIG",
            tc.dumps_tf_config(
                tc.build_tf_config({"worker": [f"localhost:{port}", "localhost:1"]}, "worker", 0)
            ),
        )
        code, _, err = _run(capsys, "--check")
    assert code == 1
    assert f"Port {port} for worker 0 (localhost:{port}) is already in use" in err


def test_help_exits_0(capsys):
    code, out, _ = _run(capsys, "--help")
    assert code == 0 and "--hostfile" in out and "examples:" in out


def test_local_evaluator_gets_its_own_port(capsys):
    code, out, _ = _run(capsys, "--local", "2", "--evaluator", "--task-type", "evaluator")
    assert code == 0
    cfg = json.loads(out)
    (address,) = cfg["cluster"]["evaluator"]
    assert address not in cfg["cluster"]["worker"]
    assert cfg["task"] == {"type": "evaluator", "index": 0}
    code, out, _ = _run(
        capsys, "--local", "4", "--num-ps", "1", "--evaluator", "--task-type", "evaluator"
    )
    assert code == 0
    assert set(json.loads(out)["cluster"]) == {"chief", "worker", "ps", "evaluator"}
    code, _, err = _run(capsys, "--workers", "h:1,h:2", "--evaluator")
    assert code == 2 and "Missing address for `--evaluator`" in err
