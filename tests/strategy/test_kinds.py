"""The strategy-kind registry: one module per kind, chosen by `select`."""

import pytest

from tfdist_opt.strategy import kinds
from tfdist_opt.strategy.config import MODES
from tfdist_opt.strategy.config import StrategyConfig
from tfdist_opt.strategy.kinds import Kind
from tfdist_opt.strategy.plan import plan_strategy
from tfdist_opt.strategy.topology import Topology

_PS_CLUSTER = {
    "cluster": {"chief": ["localhost:1"], "worker": ["localhost:2"],
                "ps": ["localhost:3"]},
    "task": {"type": "chief", "index": 0}}


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
    two = {"cluster": {"worker": ["localhost:1", "localhost:2"]},
           "task": {"type": "worker", "index": 0}}
    assert kinds.select(StrategyConfig(cpu_replicas=2), Topology(tf_config=two),
                        reasons) is Kind.MULTI_WORKER
    assert kinds.select(StrategyConfig(cpu_replicas=2), Topology(), reasons
                        ) is Kind.MIRRORED
    assert kinds.select(StrategyConfig(), Topology(gpus=("/gpu:0",)), reasons
                        ) is Kind.ONE_DEVICE
    assert reasons == ["TF_CONFIG has 2 tasks",
                       "no GPU; cpu_replicas=2 virtual CPU devices",
                       "1 GPU on this host"]


def test_a_role_no_kind_runs_is_refused_at_once_naming_it():
    evaluator = {
        "cluster": {"chief": ["localhost:1"], "worker": ["localhost:2"],
                    "evaluator": ["localhost:3"]},
        "task": {"type": "chief", "index": 0}}
    assert not any("evaluator" in kinds.module(k).ROLES for k in Kind)
    with pytest.raises(ValueError, match=r"'evaluator'"):
        plan_strategy(StrategyConfig(), Topology(tf_config=evaluator))
    with pytest.raises(ValueError, match=r"'ps' cannot take part"):
        plan_strategy(StrategyConfig(mode="multi_worker"),
                      Topology(tf_config=_PS_CLUSTER))


def test_local_kinds_refuse_a_cluster():
    with pytest.raises(ValueError, match="each would train alone under 'mirrored'"):
        plan_strategy(StrategyConfig(mode="mirrored"),
                      Topology(tf_config=_PS_CLUSTER))


@pytest.mark.parametrize("task_type,index,has_chief,expected", [
    (None, None, False, True), ("chief", 0, True, True),
    ("worker", 0, False, True), ("worker", 0, True, False),
    ("worker", 1, False, False), ("ps", 0, True, False),
    ("evaluator", 0, True, False),
])
def test_one_chief_rule(task_type, index, has_chief, expected):
    from tfdist_opt.strategy.topology import is_chief

    assert is_chief(task_type, index, has_chief) is expected
