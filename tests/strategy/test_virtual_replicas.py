"""`replicas`: a replica count fixed across worker counts (pure, no TF ops)."""

import pytest

from tfdist_opt.strategy.devices import virtual_replicas
from tfdist_opt.strategy.config import StrategyConfig
from tfdist_opt.strategy.plan import plan_strategy
from tfdist_opt.strategy.topology import Topology


def _cluster(workers, ps=0):
    cluster = {"worker": [f"localhost:{i + 1}" for i in range(workers)]}
    if ps:
        cluster["ps"] = [f"localhost:{100 + i}" for i in range(ps)]
        cluster["chief"] = ["localhost:99"]
    return {"cluster": cluster, "task": {"type": "worker", "index": 0}}


def _plan(workers, gpus=(), **kw):
    tf_config = _cluster(workers) if workers > 1 else None
    return plan_strategy(StrategyConfig(**kw), Topology(gpus=gpus, tf_config=tf_config))


@pytest.mark.parametrize(
    "workers,replicas,kind,devices,created",
    [
        (1, 2, "mirrored", ("/cpu:0", "/cpu:1"), 2),
        (1, 1, "one_device", ("/cpu:0",), 0),
        (2, 2, "multi_worker", ("/cpu:0",), 0),
        (2, 4, "multi_worker", ("/cpu:0", "/cpu:1"), 2),
        (4, 8, "multi_worker", ("/cpu:0", "/cpu:1"), 2),
    ],
)
def test_each_worker_runs_replicas_over_workers(workers, replicas, kind, devices, created):
    p = _plan(workers, replicas=replicas, all_reduce="ring")
    assert (p.kind, p.devices, p.cpu_replicas) == (kind, devices, created)
    assert p.num_local_replicas * workers == replicas


def test_ring_on_one_worker_reduces_locally():
    p = _plan(1, replicas=2, all_reduce="ring")
    assert p.all_reduce == "reduce_to_one"
    assert any("RING is multi-worker" in r for r in p.reasons)


@pytest.mark.parametrize("workers,replicas", [(2, 3), (3, 4), (4, 2)])
def test_replicas_not_a_multiple_of_workers(workers, replicas):
    with pytest.raises(
        ValueError,
        match=(
            rf"Invalid value for `replicas` on {workers} worker\(s\).*"
            rf"Received: replicas={replicas}, workers={workers}. Expected a "
            rf"multiple of {workers}"
        ),
    ):
        _plan(workers, replicas=replicas)


def test_refused_on_gpus():
    with pytest.raises(
        ValueError,
        match=r"`replicas` on a host with 2 GPU.*"
        r"Received: replicas=2",
    ):
        _plan(2, gpus=("/physical_device:GPU:0", "/physical_device:GPU:1"), replicas=2)


def test_refused_with_parameter_servers():
    topo = Topology(tf_config=_cluster(2, ps=1))
    with pytest.raises(
        ValueError,
        match=r"`replicas` with a parameter_server "
        r"strategy.*Received: replicas=2",
    ):
        plan_strategy(StrategyConfig(replicas=2), topo)


def test_refused_with_one_device():
    with pytest.raises(ValueError, match=r"`replicas` with mode 'one_device'"):
        _plan(1, replicas=2, mode="one_device")


@pytest.mark.parametrize("value", [0, -1, 1.5, "2", True])
def test_field_type(value):
    with pytest.raises(
        ValueError,
        match=rf"Invalid value for `replicas`: "
        rf"expected a positive int or None. Received: replicas=",
    ):
        StrategyConfig(replicas=value)


def test_not_with_cpu_replicas():
    with pytest.raises(
        ValueError,
        match=r"`cpu_replicas` with `replicas` set.*"
        r"Received: cpu_replicas=2, replicas=2",
    ):
        StrategyConfig(replicas=2, cpu_replicas=2)


def test_env_and_default():
    assert StrategyConfig().replicas is None
    cfg = StrategyConfig.load(environ={"TFDIST_OPT_REPLICAS": "4"})
    assert cfg.replicas == 4
    assert StrategyConfig.load(environ={"TFDIST_OPT_REPLICAS": "none"}).replicas is None


def test_data_slot():
    # TF's multi-worker input deals a global batch's R slices to the workers
    # in turn: worker w's local replica l trains on slice l * W + w.
    assert [virtual_replicas.data_slot(r, 2, 2) for r in range(4)] == [0, 2, 1, 3]
    assert [virtual_replicas.data_slot(r, 1, 4) for r in range(4)] == [0, 1, 2, 3]
    assert [virtual_replicas.data_slot(r, 4, 1) for r in range(4)] == [0, 1, 2, 3]
    assert [virtual_replicas.data_slot(r, 2, 3) for r in range(6)] == [0, 2, 4, 1, 3, 5]
