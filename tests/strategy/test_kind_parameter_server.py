"""Kind `parameter_server`: chosen for TF_CONFIGs with ps tasks; bad clusters refused at once."""

import re

import pytest

from tfdist_opt.parameter_server import serving
from tfdist_opt.strategy import kinds
from tfdist_opt.strategy.config import StrategyConfig
from tfdist_opt.strategy.kinds import Kind
from tfdist_opt.strategy.plan import plan_strategy
from tfdist_opt.strategy.topology import Topology


def _cfg(task="chief", index=0, chief=1, workers=2, ps=2, evaluator=0):
    cluster = {}
    port = iter(range(2000, 2100))
    for role, n in (("chief", chief), ("worker", workers), ("ps", ps), ("evaluator", evaluator)):
        if n:
            cluster[role] = [f"localhost:{next(port)}" for _ in range(n)]
    return {"cluster": cluster, "task": {"type": task, "index": index}}


def test_auto_chooses_parameter_server_when_tf_config_has_ps():
    plan = plan_strategy(StrategyConfig(), Topology(tf_config=_cfg()))
    assert plan.kind is Kind.PARAMETER_SERVER
    assert plan.reasons[0] == "TF_CONFIG has 2 ps task(s), 2 worker(s) and 1 chief"
    assert plan.all_reduce is None


def test_same_plan_on_every_task_with_its_role():
    chief = plan_strategy(StrategyConfig(), Topology(tf_config=_cfg()))
    ps = plan_strategy(StrategyConfig(), Topology(tf_config=_cfg("ps", 1)))
    assert chief.kind is ps.kind is Kind.PARAMETER_SERVER
    assert chief.settings["role"].startswith("coordinator")
    assert ps.settings["role"].startswith("serves until the chief finishes")
    assert ps.settings["task"] == "ps:1"


def test_partitioning_settings_from_config():
    plan = plan_strategy(StrategyConfig(ps_min_shard_bytes=1 << 20), Topology(tf_config=_cfg(ps=3)))
    assert plan.settings["max_shards"] == 3
    assert plan.settings["min_shard_bytes"] == 1 << 20
    assert "at most 3 shards" in plan.settings["variable_partitioning"]
    off = plan_strategy(StrategyConfig(ps_max_shards=1), Topology(tf_config=_cfg()))
    assert off.settings["variable_partitioning"].startswith("off")


@pytest.mark.parametrize(
    "counts,named",
    [
        (dict(chief=0), "chief=0 (expected exactly 1"),
        (dict(workers=0), "worker=0 (expected at least 1)"),
    ],
)
def test_bad_role_counts_are_named(counts, named):
    task = "worker" if counts.get("chief") == 0 else "chief"
    with pytest.raises(ValueError, match=r"bad task counts.*" + re.escape(named)):
        plan_strategy(StrategyConfig(), Topology(tf_config=_cfg(task, **counts)))


def test_requested_without_ps_names_the_count():
    with pytest.raises(ValueError, match=r"ps=0 \(expected at least 1\)"):
        plan_strategy(StrategyConfig(mode="parameter_server"), Topology(tf_config=_cfg(ps=0)))
    with pytest.raises(ValueError, match="TF_CONFIG unset"):
        plan_strategy(StrategyConfig(mode="parameter_server"), Topology())


def test_roles_a_kind_cannot_run_are_refused_at_once_naming_them():
    # The evaluator is not part of the training cluster: PS training ignores it.
    assert (
        plan_strategy(StrategyConfig(), Topology(tf_config=_cfg(evaluator=1))).kind.value
        == "parameter_server"
    )
    with pytest.raises(ValueError, match=r"'ps' cannot take part"):
        plan_strategy(StrategyConfig(mode="multi_worker"), Topology(tf_config=_cfg()))


def test_all_reduce_settings_refused_or_warned():
    with pytest.raises(ValueError, match="grad_accum"):
        plan_strategy(StrategyConfig(grad_accum=2), Topology(tf_config=_cfg()))
    plan = plan_strategy(StrategyConfig(all_reduce="ring"), Topology(tf_config=_cfg()))
    assert any("all_reduce=ring has no effect" in w for w in plan.warnings)


def test_registry_interface():
    module = kinds.module(Kind.PARAMETER_SERVER)
    assert module.ROLES == {"chief", "worker", "ps"}
    assert module.AUTO_PRIORITY < kinds.module(Kind.MULTI_WORKER).AUTO_PRIORITY


class _Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t

    def sleep(self, s):
        self.t += s


def test_watch_chief_returns_after_the_chief_is_gone_for_the_grace_period():
    clock = _Clock()
    timeline = [False, False, True, True, False, False, False, False, False, False, False]
    seen = iter(timeline)
    out = serving.watch_chief(
        "localhost:1",
        60,
        grace_s=1.0,
        poll_s=0.5,
        clock=clock,
        sleep=clock.sleep,
        answers=lambda a: next(seen),
    )
    assert out == "done"
    assert clock.t == pytest.approx(3.0)  # up at 1.0-1.5, gone from 2.0, +1.0 grace


def test_watch_chief_blip_does_not_end_serving():
    clock = _Clock()
    seen = iter([True, False, True, True, False, False, False, False])
    out = serving.watch_chief(
        "localhost:1",
        60,
        grace_s=1.0,
        poll_s=0.5,
        clock=clock,
        sleep=clock.sleep,
        answers=lambda a: next(seen),
    )
    assert out == "done" and clock.t == pytest.approx(3.0)


def test_watch_chief_that_never_comes():
    clock = _Clock()
    out = serving.watch_chief(
        "localhost:1", 5, poll_s=1.0, clock=clock, sleep=clock.sleep, answers=lambda a: False
    )
    assert out == "never came" and clock.t == pytest.approx(6.0)
