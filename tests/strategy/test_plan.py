"""plan_strategy(): every decision branch, pure (no TensorFlow ops)."""

import pytest

from tfdist_opt.strategy.config import StrategyConfig
from tfdist_opt.strategy.plan import plan_strategy
from tfdist_opt.strategy.topology import Topology

TWO_WORKERS = {
    "cluster": {"worker": ["localhost:1", "localhost:2"]},
    "task": {"type": "worker", "index": 1},
}
ONE_WORKER = {"cluster": {"worker": ["localhost:1"]}, "task": {"type": "worker", "index": 0}}
GPUS = ("/physical_device:GPU:0", "/physical_device:GPU:1")


def plan(topology=Topology(), **kw):
    return plan_strategy(StrategyConfig(**kw), topology)


@pytest.mark.parametrize(
    "topology,kw,kind,devices,impl",
    [
        (Topology(tf_config=TWO_WORKERS), {}, "multi_worker", ("/cpu:0",), "ring"),
        (
            Topology(gpus=GPUS, tf_config=TWO_WORKERS),
            {},
            "multi_worker",
            ("/gpu:0", "/gpu:1"),
            "nccl",
        ),
        (Topology(gpus=GPUS), {}, "mirrored", ("/gpu:0", "/gpu:1"), "nccl"),
        (Topology(gpus=GPUS[:1]), {}, "one_device", ("/gpu:0",), None),
        (Topology(), {}, "one_device", ("/cpu:0",), None),
        (Topology(), {"cpu_replicas": 1}, "one_device", ("/cpu:0",), None),
        (Topology(), {"cpu_replicas": 2}, "mirrored", ("/cpu:0", "/cpu:1"), "reduce_to_one"),
        (Topology(tf_config=ONE_WORKER), {}, "one_device", ("/cpu:0",), None),
    ],
)
def test_auto(topology, kw, kind, devices, impl):
    p = plan(topology, **kw)
    assert (p.kind, p.devices, p.all_reduce) == (kind, devices, impl)
    assert p.reasons  # every decision says why
    assert kind in p.describe()


def test_auto_on_cpu_says_why_not_nccl():
    p = plan(Topology(tf_config=TWO_WORKERS))
    assert any("no GPU, so ring (NCCL needs GPUs)" in r for r in p.reasons)


def test_explicit_modes():
    assert plan(mode="one_device", cpu_replicas=4).devices == ("/cpu:0",)
    assert plan(mode="mirrored").devices == ("/cpu:0",)
    assert plan(Topology(gpus=GPUS), mode="one_device").devices == ("/gpu:0",)
    assert plan(Topology(tf_config=ONE_WORKER), mode="multi_worker").kind == "multi_worker"
    p = plan(Topology(gpus=GPUS), mode="mirrored", all_reduce="hierarchical_copy", num_packs=2)
    assert (p.all_reduce, p.warnings) == ("hierarchical_copy", ())


def test_multi_worker_without_tf_config_refused():
    with pytest.raises(
        ValueError,
        match=r"multi_worker needs a TF_CONFIG .* Received: mode='multi_worker', TF_CONFIG unset",
    ):
        plan(mode="multi_worker")


@pytest.mark.parametrize("mode", ["one_device", "mirrored"])
def test_single_host_mode_with_cluster_refused(mode):
    with pytest.raises(ValueError, match=rf"TF_CONFIG names 2 tasks.*Received: mode='{mode}'"):
        plan(Topology(tf_config=TWO_WORKERS), mode=mode)


def test_nccl_without_gpu_is_an_error():
    with pytest.raises(
        ValueError,
        match=r"NCCL needs GPUs and this host has none. Received: all_reduce='nccl'. Expected 'auto' or 'ring'",
    ):
        plan(Topology(tf_config=TWO_WORKERS), all_reduce="nccl")
    with pytest.raises(
        ValueError,
        match=r"Received: all_reduce='nccl'. Expected 'auto' or 'hierarchical_copy' or 'reduce_to_one' on CPU",
    ):
        plan(cpu_replicas=2, all_reduce="nccl")


@pytest.mark.parametrize(
    "topology,kw,bad",
    [
        (Topology(tf_config=TWO_WORKERS), {"all_reduce": "hierarchical_copy"}, "hierarchical_copy"),
        (Topology(tf_config=TWO_WORKERS), {"all_reduce": "reduce_to_one"}, "reduce_to_one"),
        (Topology(), {"cpu_replicas": 2, "all_reduce": "ring"}, "ring"),
    ],
)
def test_impl_not_available_for_kind(topology, kw, bad):
    with pytest.raises(
        ValueError,
        match=rf"Invalid value for `all_reduce` with a .* strategy.*Received: all_reduce='{bad}'",
    ):
        plan(topology, **kw)


def test_cpu_replicas_with_multi_worker_refused():
    with pytest.raises(
        ValueError, match=r"`cpu_replicas` with mode multi_worker.*Received: cpu_replicas=2"
    ):
        plan(Topology(tf_config=TWO_WORKERS), cpu_replicas=2)


def test_settings_that_do_not_apply_are_said():
    p = plan(
        cpu_replicas=2,
        bytes_per_pack=1024,
        collective_timeout_s=5.0,
        num_packs=2,
        stall_abort_s=600,
    )
    text = " | ".join(p.warnings)
    assert "stall_abort_s=600 has no effect with mirrored" in text
    assert "bytes_per_pack=1024 has no effect with mirrored" in text
    assert "collective_timeout_s=5.0 has no effect" in text
    assert "num_packs=2 has no effect with mirrored/reduce_to_one" in text
    p = plan(Topology(gpus=GPUS), cpu_replicas=2)
    assert "cpu_replicas=2 ignored: 2 GPU(s) present" in p.warnings[0]
    assert plan(Topology(tf_config=TWO_WORKERS), bytes_per_pack=1024).warnings == ()


def test_topology_roles():
    t = Topology(tf_config=TWO_WORKERS)
    assert (t.num_workers, t.task_type, t.task_index, t.is_chief) == (2, "worker", 1, False)
    t0 = Topology(tf_config={**TWO_WORKERS, "task": {"type": "worker", "index": 0}})
    assert t0.is_chief
    with_chief = {
        "cluster": {"chief": ["localhost:3"], "worker": ["localhost:1"]},
        "task": {"type": "worker", "index": 0},
    }
    assert not Topology(tf_config=with_chief).is_chief
    assert Topology(tf_config=with_chief).num_workers == 2
    assert Topology().is_chief and Topology().num_workers == 1


def test_strategy_is_chief_follows_the_one_chief_rule():
    import types

    from tfdist_opt.strategy import topology

    def strategy(task_type, task_id, jobs):
        spec = types.SimpleNamespace(as_dict=lambda: jobs)
        return types.SimpleNamespace(
            cluster_resolver=types.SimpleNamespace(
                task_type=task_type, task_id=task_id, cluster_spec=lambda: spec
            )
        )

    workers = {"worker": ["a:1", "b:2"]}
    with_chief = dict(workers, chief=["c:3"])
    assert topology.strategy_is_chief(None)
    assert topology.strategy_is_chief(types.SimpleNamespace())  # no resolver
    assert topology.strategy_is_chief(strategy(None, None, {}))  # no TF_CONFIG
    assert topology.strategy_is_chief(strategy("worker", 0, workers))
    assert not topology.strategy_is_chief(strategy("worker", 1, workers))
    assert not topology.strategy_is_chief(strategy("worker", 0, with_chief))
    assert topology.strategy_is_chief(strategy("chief", 0, with_chief))
