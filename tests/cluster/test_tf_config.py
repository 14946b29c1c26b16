"""TF_CONFIG build / validate / apply: pure Python, milliseconds."""

import json
import os
import subprocess
import sys
import warnings

import pytest

from tfdist_opt.cluster import tf_config as tc

TWO = {"worker": ["h1:2222", "h2:2222"]}


def _cfg(cluster=None, task_type="worker", index=0):
    return {
        "cluster": TWO if cluster is None else cluster,
        "task": {"type": task_type, "index": index},
    }


# ------------------------------------------------------------ round trip
@pytest.mark.parametrize(
    "cluster,task_type,index",
    [
        (TWO, "worker", 1),
        ({"chief": ["c:1"], "worker": ["w0:1", "w1:1"]}, "chief", 0),
        (
            {"chief": ["c:1"], "worker": ["w0:1"], "ps": ["p0:1", "p1:1"], "evaluator": ["e:1"]},
            "ps",
            1,
        ),
        ({"chief": ["c:1"], "worker": ["w0:1"], "evaluator": ["e:1"]}, "evaluator", 0),
        ({"worker": ["[fd00::1]:2222", "[fd00::2]:2222"]}, "worker", 0),
    ],
)
def test_build_parse_round_trip(cluster, task_type, index):
    cfg = tc.build_tf_config(cluster, task_type, index)
    assert cfg == {"cluster": cluster, "task": {"type": task_type, "index": index}}
    text = tc.dumps_tf_config(cfg)
    assert tc.parse_tf_config(text) == cfg
    assert tc.tf_config_from_env({"TF_CONFIG": text}) == cfg


def test_build_orders_roles_chief_first_and_copies():
    workers = ["w0:1"]
    cfg = tc.build_tf_config({"ps": ["p:1"], "worker": workers, "chief": ["c:1"]}, "worker", 0)
    assert list(cfg["cluster"]) == ["chief", "worker", "ps"]
    workers.append("w1:1")
    assert cfg["cluster"]["worker"] == ["w0:1"]


def test_build_all_tf_configs_one_per_task_chief_first():
    cfgs = tc.build_all_tf_configs({"worker": ["w0:1", "w1:1"], "chief": ["c:1"]})
    assert [(c["task"]["type"], c["task"]["index"]) for c in cfgs] == [
        ("chief", 0),
        ("worker", 0),
        ("worker", 1),
    ]
    assert tc.num_tasks(cfgs[0]) == 3


def test_unset_or_empty_env_is_single_worker():
    assert tc.tf_config_from_env({}) is None
    assert tc.tf_config_from_env({"TF_CONFIG": "  "}) is None


def test_apply_writes_only_the_given_environment(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    env = {}
    cfg = tc.build_tf_config(TWO, "worker", 1)
    tc.apply_tf_config(cfg, env)
    assert json.loads(env["TF_CONFIG"]) == cfg
    assert "TF_CONFIG" not in os.environ
    tc.apply_tf_config(None, env)
    assert "TF_CONFIG" not in env


def test_apply_writes_os_environ_and_validates(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    tc.apply_tf_config(tc.build_tf_config(TWO, "worker", 0))
    assert tc.tf_config_from_env()["task"]["index"] == 0
    with pytest.raises(ValueError, match="task.index"):
        tc.apply_tf_config(_cfg(index=5))


def test_file_source_is_named(tmp_path):
    path = tmp_path / "tf.json"
    path.write_text('{"cluster": {"worker": ["h1:2222"]}, "task": {"type": "worker"')
    with pytest.raises(ValueError, match=r"TF_CONFIG \(from file .*tf.json\): malformed"):
        tc.tf_config_from_file(path)
    path.write_text(json.dumps(_cfg()))
    assert tc.tf_config_from_file(path) == _cfg()


def test_module_does_not_import_tensorflow():
    code = (
        "import sys; import tfdist_opt.cluster.tf_config, "
        "tfdist_opt.cluster.sources, tfdist_opt.launch.local, "
        "tfdist_opt.launch.remote, tfdist_opt.cli.tf_config, "
        "tfdist_opt.cli.launch; "
        "assert 'tensorflow' not in sys.modules, 'tensorflow imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# ------------------------------------------------------------ errors
def test_malformed_json_names_position():
    text = '{"cluster": {"worker": ["h1:2222",]}, "task": {}}'
    with pytest.raises(tc.TFConfigError) as e:
        tc.parse_tf_config(text)
    msg = str(e.value)
    assert msg.startswith("Invalid TF_CONFIG: malformed JSON")
    assert "line 1 column 35, char 34" in msg
    assert "Received: TF_CONFIG=" in msg
    assert isinstance(e.value, ValueError)


def test_single_quoted_json_names_position():
    with pytest.raises(
        ValueError,
        match=r"malformed JSON \(Expecting property name "
        r"enclosed in double quotes at line 1 column 2, char 1",
    ):
        tc.parse_tf_config("{'cluster': {}}")


# (cfg, field in message, received text)
_BAD = [
    ({"task": {"type": "worker", "index": 0}}, "cluster", "cluster=None"),
    ({"cluster": {}, "task": {"type": "worker", "index": 0}}, "cluster", "cluster={}"),
    ({"cluster": ["h1:2222"], "task": {}}, "cluster", "cluster=['h1:2222']"),
    (_cfg({"master": ["h:1"]}), "cluster.master", "cluster.master=['h:1']"),
    (_cfg({"worker": "h1:2222"}), "cluster.worker", "cluster.worker='h1:2222'"),
    (_cfg({"worker": []}), "cluster.worker", "cluster.worker=[]"),
    (_cfg({"worker": [2222]}), "cluster.worker", "cluster.worker=[2222]"),
    (_cfg(task_type="master"), "task.type", "task.type='master'"),
    (_cfg(task_type="ps"), "task.type", "task.type='ps'"),
    (_cfg(index=-1), "task.index", "task.index=-1"),
    (_cfg(index=2), "task.index", "task.index=2"),
    (_cfg(index="1"), "task.index", "task.index='1'"),
    (_cfg(index=1.0), "task.index", "task.index=1.0"),
    (_cfg(index=True), "task.index", "task.index=True"),
    (_cfg(index=None), "task.index", "task.index=None"),
    ({"cluster": TWO}, "task", "task=None"),
    ({"cluster": TWO, "task": "worker"}, "task", "task='worker'"),
    (_cfg({"worker": ["h1", "h2:2222"]}), "cluster.worker[0]", "cluster.worker[0]='h1'"),
    (_cfg({"worker": ["h1:", "h2:2222"]}), "cluster.worker[0]", "cluster.worker[0]='h1:'"),
    (_cfg({"worker": ["h1:2222", "h2:http"]}), "cluster.worker[1]", "cluster.worker[1]='h2:http'"),
    (_cfg({"worker": ["h1:0", "h2:2222"]}), "cluster.worker[0]", "cluster.worker[0]='h1:0'"),
    (_cfg({"worker": ["h1:70000"]}), "cluster.worker[0]", "cluster.worker[0]='h1:70000'"),
    (_cfg({"worker": [":2222"]}), "cluster.worker[0]", "cluster.worker[0]=':2222'"),
    (_cfg({"worker": ["h1:2222", "h1:2222"]}), "cluster.worker[1]", "cluster.worker[1]='h1:2222'"),
    (
        _cfg({"chief": ["h1:2222"], "worker": ["H1:2222"]}),
        "cluster.worker[0]",
        "cluster.worker[0]='H1:2222'",
    ),
    (
        _cfg({"worker": ["localhost:2222", "127.0.0.1:2222"]}),
        "cluster.worker[1]",
        "cluster.worker[1]='127.0.0.1:2222'",
    ),
    (
        _cfg({"chief": ["c1:1", "c2:1"], "worker": ["w:1"]}),
        "cluster.chief",
        "cluster.chief=['c1:1', 'c2:1']",
    ),
    (
        _cfg({"worker": ["w:1"], "evaluator": ["e1:1", "e2:1"]}),
        "cluster.evaluator",
        "cluster.evaluator=['e1:1', 'e2:1']",
    ),
    (
        _cfg({"worker": ["localhost:2222", "h2:2222"]}),
        "cluster.worker[0]",
        "cluster.worker[0]='localhost:2222', cluster.worker[1]='h2:2222'",
    ),
    (
        _cfg({"worker": ["10.0.0.1:2222", "127.0.0.1:2223"]}),
        "cluster.worker[1]",
        "cluster.worker[1]='127.0.0.1:2223', cluster.worker[0]='10.0.0.1:2222'",
    ),
]


@pytest.mark.parametrize("cfg,field,received", _BAD)
def test_validation_errors_name_tf_config_field_and_value(cfg, field, received):
    with pytest.raises(tc.TFConfigError) as e:
        tc.validate_tf_config(cfg)
    msg = str(e.value)
    assert msg.startswith("Invalid TF_CONFIG"), msg
    assert f"`{field}`" in msg, msg
    assert f"Received: {received}" in msg, msg
    # The same problem through the environment names where it came from.
    with pytest.raises(ValueError, match=r"TF_CONFIG \(from environment\)"):
        tc.tf_config_from_env({"TF_CONFIG": json.dumps(cfg)})


def test_missing_cluster_says_how_to_run_single_worker():
    with pytest.raises(ValueError, match="unset TF_CONFIG for a single-worker run"):
        tc.parse_tf_config('{"task": {"type": "worker", "index": 0}}')


def test_top_level_must_be_object_with_known_keys():
    with pytest.raises(ValueError, match=r"expected a JSON object .* Received: list"):
        tc.parse_tf_config('["h1:2222"]')
    with pytest.raises(ValueError, match=r"unknown top-level field\(s\) clusters"):
        tc.validate_tf_config({"clusters": TWO, "task": {"type": "worker", "index": 0}})
    ok = dict(_cfg(), rpc_layer="grpc", environment="cloud")
    assert tc.validate_tf_config(ok) == []


def test_parse_rejects_non_text():
    with pytest.raises(TypeError, match="expected JSON text"):
        tc.parse_tf_config(b"{}")


# ------------------------------------------------------------ warnings
@pytest.mark.parametrize(
    "address,kind",
    [
        ("0.0.0.0:2222", "wildcard"),
        ("[::]:2222", "wildcard"),
        ("8.8.8.8:2222", "public"),
    ],
)
def test_wildcard_and_public_addresses_warn_about_unauthenticated_grpc(address, kind):
    cfg = _cfg({"worker": [address, "10.0.0.2:2222"] if kind == "public" else [address]})
    with pytest.warns(UserWarning, match=f"is a {kind} address.*without authentication"):
        found = tc.validate_tf_config(cfg)
    assert len(found) == 1


def test_private_and_named_hosts_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for workers in (
            ["10.0.0.1:1", "192.168.1.2:1", "node01:1"],
            ["localhost:1", "127.0.0.1:2"],
        ):
            assert tc.validate_tf_config(_cfg({"worker": workers})) == []


def test_ps_without_chief_warns():
    found = tc.validate_tf_config(_cfg({"worker": ["w:1"], "ps": ["p:1"]}), warn=False)
    assert any("needs a chief" in m for m in found)


def test_split_address():
    assert tc.split_address("h:1") == ("h", "1")
    assert tc.split_address("[::1]:22") == ("::1", "22")
    assert tc.split_address("::1") == ("::1", None)
    assert tc.split_address("h") == ("h", None)
