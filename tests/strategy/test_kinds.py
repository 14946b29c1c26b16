"""The strategy-kind registry: one module per kind, chosen by `select`."""

import pytest

from tfdist_opt.strategy import kinds
from tfdist_opt.strategy.config import MODES
from tfdist_opt.strategy.config import StrategyConfig
from tfdist_opt.strategy.kinds import Kind
from tfdist_opt.strategy.plan import plan_strategy
from tfdist_opt.strategy.topology import Topology

_PS_CLUSTER = {
    "cluster": {"chief": ["localhost:1"], "worker": ["localhost:2"], "ps": ["localhost:3"]},
    "task": {"type": "chief", "index": 0},
}


@pytest.mark.parametrize("kind", list(Kind))
def test_every_kind_module_has_the_interface(kind):
    module = kinds.module(kind)
    assert module.KIND is kind
    assert isinstance(module.ROLES, frozenset)
    assert module.AUTO_PRIORITY is None or isinstance(module.AUTO_PRIORITY, int)
    for fn in ("auto_reason", "requested_reason", "plan", "build"):
        assert callable(getattr(module, fn)), fn


def test_modes_are_auto_plus_every_kind():
    assert MODES == ("auto",) + tuple(k.value for k in Kind)


def test_kind_is_a_string():
    assert Kind.MIRRORED == "mirrored"
    assert f"{Kind.MULTI_WORKER}" == "multi_worker"


def test_auto_priority_order():
    reasons = []
    two = {
        "cluster": {"worker": ["localhost:1", "localhost:2"]},
        "task": {"type": "worker", "index": 0},
    }
    assert (
        kinds.select(StrategyConfig(cpu_replicas=2), Topology(tf_config=two), reasons)
        is Kind.MULTI_WORKER
    )
    assert kinds.select(StrategyConfig(cpu_replicas=2), Topology(), reasons) is Kind.MIRRORED
    assert kinds.select(StrategyConfig(), Topology(gpus=("/gpu:0",)), reasons) is Kind.ONE_DEVICE
    assert reasons == [
        "TF_CONFIG has 2 tasks",
        "no GPU; cpu_replicas=2 virtual CPU devices",
        "1 GPU on this host",
    ]


def test_a_role_no_kind_runs_is_refused_at_once_naming_it():
    with pytest.raises(ValueError, match=r"'ps' cannot take part"):
        plan_strategy(StrategyConfig(mode="multi_worker"), Topology(tf_config=_PS_CLUSTER))


_EVAL_CLUSTER = {"chief": ["localhost:1"], "worker": ["localhost:2"], "evaluator": ["localhost:3"]}


@pytest.mark.parametrize("mode", ["auto", "multi_worker"])
def test_training_tasks_ignore_the_evaluator(mode):
    cfg = {"cluster": _EVAL_CLUSTER, "task": {"type": "worker", "index": 0}}
    plan = plan_strategy(StrategyConfig(mode=mode), Topology(tf_config=cfg))
    assert plan.kind is Kind.MULTI_WORKER
    assert Topology(tf_config=cfg).num_workers == 2


@pytest.mark.parametrize("mode", ["auto", "multi_worker", "parameter_server"])
def test_the_evaluator_gets_one_device_whatever_the_mode(mode):
    cfg = {
        "cluster": dict(_EVAL_CLUSTER, ps=["localhost:4"]),
        "task": {"type": "evaluator", "index": 0},
    }
    topo = Topology(tf_config=cfg)
    plan = plan_strategy(StrategyConfig(mode=mode), topo)
    assert plan.kind is Kind.ONE_DEVICE and plan.devices == ("/cpu:0",)
    assert "evaluator task" in plan.reasons[0]
    assert topo.is_evaluator and not topo.is_chief and topo.num_workers == 1
    assert "side-car" in topo.describe()


def test_task_type_reads_tf_config_without_tensorflow():
    import json

    from tfdist_opt.strategy.topology import task_type

    assert task_type({}) is None
    cfg = {"cluster": _EVAL_CLUSTER, "task": {"type": "evaluator", "index": 0}}
    assert task_type({"TF_CONFIG": json.dumps(cfg)}) == "evaluator"


def test_local_kinds_refuse_a_cluster():
    with pytest.raises(ValueError, match="each would train alone under 'mirrored'"):
        plan_strategy(StrategyConfig(mode="mirrored"), Topology(tf_config=_PS_CLUSTER))


@pytest.mark.parametrize(
    "task_type,index,has_chief,expected",
    [
        (None, None, False, True),
        ("chief", 0, True, True),
        ("worker", 0, False, True),
        ("worker", 0, True, False),
        ("worker", 1, False, False),
        ("ps", 0, True, False),
        ("evaluator", 0, True, False),
    ],
)
def test_one_chief_rule(task_type, index, has_chief, expected):
    from tfdist_opt.strategy.topology import is_chief

    assert is_chief(task_type, index, has_chief) is expected
