"""Kind `mirrored`: `tf.distribute.MirroredStrategy` over local GPUs or virtual CPUs."""

from __future__ import annotations

from tfdist_opt.strategy import plan as plan_lib
from tfdist_opt.strategy.kinds import Kind

KIND = Kind.MIRRORED
ROLES: frozenset[str] = frozenset()
AUTO_PRIORITY = 50
ALL_REDUCE = ("nccl", "hierarchical_copy", "reduce_to_one")


def auto_reason(config, topology) -> str | None:
    if topology.is_multi_worker:
        return None
    if topology.num_gpus >= 2:
        return f"{topology.num_gpus} GPUs on this host"
    if topology.num_gpus == 0 and config.cpu_replicas >= 2:
        return f"no GPU; cpu_replicas={config.cpu_replicas} virtual CPU devices"
    if topology.num_gpus == 0 and (config.replicas or 0) >= 2:
        return f"replicas={config.replicas} on 1 worker: {config.replicas} logical CPU devices"
    return None


def requested_reason(config, topology) -> str:
    plan_lib.refuse_cluster(KIND, topology)
    return "mode=mirrored requested"


def plan(config, topology, reasons: list[str]) -> plan_lib.StrategyPlan:
    gpus = topology.num_gpus
    warnings: list[str] = []
    if gpus:
        devices = tuple(f"/gpu:{i}" for i in range(gpus))
        cpu_replicas = 0
        if config.cpu_replicas:
            warnings.append(f"cpu_replicas={config.cpu_replicas} ignored: {gpus} GPU(s) present")
    else:
        cpu_replicas = config.replicas or config.cpu_replicas
        devices = tuple(f"/cpu:{i}" for i in range(max(1, cpu_replicas)))
    if config.replicas and config.all_reduce == "ring":
        # The same script resumed on 1 worker: RING is the multi-worker
        # collective; one host's replicas sum the same values in one place.
        reasons.append(
            f"all_reduce=ring with replicas={config.replicas} on 1 "
            "worker: reduce_to_one (RING is multi-worker)"
        )
        config = config.replace(all_reduce="reduce_to_one")
    all_reduce = plan_lib.choose_all_reduce(
        config,
        KIND,
        gpus,
        ALL_REDUCE,
        cpu_choice="reduce_to_one",
        reasons=reasons,
        split_gpus=topology.split_gpus,
        split_choice="hierarchical_copy",
    )
    warnings += plan_lib.inapplicable(config, KIND, all_reduce)
    return plan_lib.StrategyPlan(
        kind=KIND,
        devices=devices,
        all_reduce=all_reduce,
        cpu_replicas=cpu_replicas,
        reasons=tuple(reasons),
        warnings=tuple(warnings),
    )


def cross_device_ops(config, plan):
    """The `tf.distribute.CrossDeviceOps` for `plan.all_reduce` (in-process).

    NCCL here is `NcclAllReduce`: one process drives every local GPU and
    all-reduces among them with NCCL, no gRPC involved.
    """
    import tensorflow as tf

    if plan.all_reduce == "nccl":
        return tf.distribute.NcclAllReduce(num_packs=config.num_packs)
    if plan.all_reduce == "hierarchical_copy":
        return tf.distribute.HierarchicalCopyAllReduce(num_packs=config.num_packs)
    return tf.distribute.ReductionToOneDevice()


def build(config, plan, topology):
    from tfdist_opt.keras import keras_compat

    return keras_compat.KerasMirroredStrategy(
        list(plan.devices), cross_device_ops=cross_device_ops(config, plan)
    )
