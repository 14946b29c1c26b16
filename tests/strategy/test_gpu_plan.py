"""What `opt_strategy()` builds on GPU hosts, from a simulated device list.

The plan is pure, so a device list of 1, 2 or 8 GPUs, with and without a
2-worker TF_CONFIG, shows every GPU decision on a host without a GPU:
* kind and replica devices: one GPU -> one_device; 2 and 8 GPUs in one
  process -> mirrored over all of them; a cluster -> multi_worker, one
  replica per local GPU on every worker;
* the collective: in one process `NcclAllReduce` (cross-device ops object
  built, no GPU needed); across workers `CommunicationOptions` with
  implementation NCCL; RING on CPU;
* memory growth: on by default, also for several tasks on one host; off
  with a warning naming `--gpus-per-worker` when asked off there; off
  (TF refuses it) on GPUs split into logical devices, where NCCL is not
  chosen either (NCCL refuses two ranks on one physical GPU);
* `tfdist-opt info` shows the GPUs, the collective and the memory choice;
* `detect_topology` counts a split GPU's logical devices (TF's calls
  replaced), and `opt_strategy()` applies the plan's memory choice (never
  asking growth of a GPU with logical devices, which TF refuses).
"""

import json
import os

import pytest

from tfdist_opt import cli
from tfdist_opt.strategy.config import StrategyConfig
from tfdist_opt.strategy.kinds import mirrored
from tfdist_opt.strategy.kinds import multi_worker
from tfdist_opt.strategy.plan import plan_strategy
from tfdist_opt.strategy.topology import Topology

pytestmark = pytest.mark.gpu  # holds with or without a real GPU


def _gpus(n):
    return tuple(f"/physical_device:GPU:{i}" for i in range(n))


def _cluster(hosts=("localhost", "localhost"), index=0):
    return {
        "cluster": {"worker": [f"{h}:{2222 + i}" for i, h in enumerate(hosts)]},
        "task": {"type": "worker", "index": index},
    }


@pytest.mark.parametrize(
    "n, kind, impl", [(1, "one_device", None), (2, "mirrored", "nccl"), (8, "mirrored", "nccl")]
)
def test_one_process_over_local_gpus(n, kind, impl):
    topo = Topology(gpus=_gpus(n))
    cfg = StrategyConfig()
    p = plan_strategy(cfg, topo)
    assert (p.kind, p.devices, p.all_reduce) == (kind, tuple(f"/gpu:{i}" for i in range(n)), impl)
    assert p.gpu_memory_growth is True and "one training task" in p.gpu_memory
    if impl:
        import tensorflow as tf

        ops = mirrored.cross_device_ops(cfg, p)
        assert type(ops) is tf.distribute.NcclAllReduce
        assert any("NCCL on GPUs" in r for r in p.reasons)


@pytest.mark.parametrize("n", [1, 2, 8])
@pytest.mark.parametrize("workers", [1, 2])
def test_cluster_over_local_gpus_uses_nccl_collectives(n, workers):
    import tensorflow as tf

    topo = Topology(gpus=_gpus(n), tf_config=_cluster(("localhost",) * workers))
    cfg = StrategyConfig(mode="multi_worker")
    p = plan_strategy(cfg, topo)
    assert (p.kind, p.devices, p.all_reduce) == (
        "multi_worker",
        tuple(f"/gpu:{i}" for i in range(n)),
        "nccl",
    )
    assert p.num_local_replicas * topo.num_workers == n * workers
    impl = multi_worker.communication_options(cfg, p).implementation
    assert impl == tf.distribute.experimental.CommunicationImplementation.NCCL
    assert p.gpu_memory_growth is True


def test_cpu_cluster_uses_ring_and_no_memory_choice():
    import tensorflow as tf

    cfg = StrategyConfig()
    p = plan_strategy(cfg, Topology(tf_config=_cluster()))
    assert (p.kind, p.all_reduce, p.gpu_memory_growth, p.gpu_memory) == (
        "multi_worker",
        "ring",
        None,
        "",
    )
    impl = multi_worker.communication_options(cfg, p).implementation
    assert impl == tf.distribute.experimental.CommunicationImplementation.RING


def test_memory_growth_off_warns_when_tasks_share_a_host():
    shared = Topology(gpus=_gpus(2), tf_config=_cluster())
    p = plan_strategy(StrategyConfig(), shared)
    assert p.gpu_memory_growth is True and "2 training tasks on this host" in p.gpu_memory
    assert not any("gpu_memory_growth" in w for w in p.warnings)
    off = plan_strategy(StrategyConfig(gpu_memory_growth=False), shared)
    assert off.gpu_memory_growth is False
    assert [
        w
        for w in off.warnings
        if "gpu_memory_growth=False with 2 training tasks on this host" in w
        and "--gpus-per-worker" in w
    ]
    apart = Topology(gpus=_gpus(2), tf_config=_cluster(("host-a", "host-b")))
    alone = plan_strategy(StrategyConfig(gpu_memory_growth=False), apart)
    assert alone.gpu_memory_growth is False and alone.warnings == ()


def test_split_gpu_keeps_its_limits_and_avoids_nccl():
    logical = ("/physical_device:GPU:0/logical:0", "/physical_device:GPU:0/logical:1")
    topo = Topology(gpus=logical, configured_gpus=1, split_gpus=1)
    p = plan_strategy(StrategyConfig(), topo)
    assert (p.kind, p.devices, p.all_reduce) == (
        "mirrored",
        ("/gpu:0", "/gpu:1"),
        "hierarchical_copy",
    )
    assert any("NCCL refuses two ranks on one physical GPU" in r for r in p.reasons)
    assert p.gpu_memory_growth is False and "memory limits" in p.gpu_memory
    asked = plan_strategy(StrategyConfig(all_reduce="nccl"), topo)
    assert asked.all_reduce == "nccl"
    assert any("Duplicate GPU detected" in w for w in asked.warnings)
    cluster = plan_strategy(
        StrategyConfig(),
        Topology(gpus=logical, tf_config=_cluster(), configured_gpus=1, split_gpus=1),
    )
    assert (cluster.kind, cluster.all_reduce) == ("multi_worker", "ring")
    # One limited logical device per GPU: NCCL stays, growth stays off.
    limited = plan_strategy(StrategyConfig(), Topology(gpus=_gpus(2), configured_gpus=2))
    assert (limited.all_reduce, limited.gpu_memory_growth) == ("nccl", False)


@pytest.fixture
def info(monkeypatch, capsys, fake_gpus):
    """`tfdist-opt info ARGS` in this process on `n` simulated GPUs."""

    def run(n, *args, tf_config=None):
        for k in list(os.environ):
            if k == "TF_CONFIG" or k.startswith("TFDIST_OPT_"):
                monkeypatch.delenv(k)
        if tf_config:
            monkeypatch.setenv("TF_CONFIG", json.dumps(tf_config))
        fake_gpus(n)
        capsys.readouterr()
        assert cli.main(["info", *args]) == 0
        return capsys.readouterr().out

    return run


def test_info_shows_gpus_collective_and_memory_choice(info):
    out = info(8)
    assert "8 GPU (/physical_device:GPU:0, " in out
    assert "strategy     : mirrored over /gpu:0, " in out and "(8 replica(s) in sync)" in out
    assert "collectives  : nccl (NcclAllReduce: NCCL among this process's GPUs" in out
    assert "gpu memory   : memory growth on (gpu_memory_growth=True" in out
    out = info(2, tf_config=_cluster())
    assert "multi_worker over /gpu:0, /gpu:1 (4 replica(s) in sync)" in out
    assert "collectives  : nccl (collective ops: NCCL across the workers' GPUs" in out
    assert "2 training tasks on this host" in out
    data = json.loads(info(1, "--json"))
    assert data["strategy"]["gpu_memory_growth"] is True
    assert data["strategy"]["kind"] == "one_device"
    assert "gpu memory" not in info(0)


def test_detect_topology_counts_logical_devices_of_a_split_gpu(fake_gpus, monkeypatch):
    import tensorflow as tf

    from tfdist_opt.strategy.topology import detect_topology

    fake_gpus(2)
    limited = tf.config.LogicalDeviceConfiguration(memory_limit=1024)
    monkeypatch.setattr(
        tf.config,
        "get_logical_device_configuration",
        lambda d: [limited] * 2 if d.name.endswith(":0") else None,
    )
    topo = detect_topology(environ={})
    assert topo.gpus == (
        "/physical_device:GPU:0/logical:0",
        "/physical_device:GPU:0/logical:1",
        "/physical_device:GPU:1",
    )
    assert (topo.configured_gpus, topo.split_gpus) == (1, 1)
    p = plan_strategy(StrategyConfig(), topo)
    assert (p.devices, p.all_reduce, p.gpu_memory_growth) == (
        ("/gpu:0", "/gpu:1", "/gpu:2"),
        "hierarchical_copy",
        False,
    )


@pytest.mark.parametrize("limited", [False, True])
def test_opt_strategy_applies_the_plans_memory_choice(fake_gpus, monkeypatch, limited):
    import tensorflow as tf

    from tfdist_opt.strategy import build

    fake_gpus(2)
    calls = []
    monkeypatch.setattr(
        tf.config.experimental, "set_memory_growth", lambda d, on: calls.append((d.name, on))
    )
    topo = Topology(gpus=_gpus(2), configured_gpus=2 if limited else 0)
    cfg = StrategyConfig()
    build._configure_devices(cfg, plan_strategy(cfg, topo))
    # TF raises ValueError for growth on a device with logical devices: none asked.
    assert calls == ([] if limited else [(g, True) for g in _gpus(2)])
