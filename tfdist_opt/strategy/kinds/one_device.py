"""Kind `one_device`: `tf.distribute.OneDeviceStrategy` on one GPU or the CPU."""

from __future__ import annotations

from tfdist_opt.strategy import plan as plan_lib
from tfdist_opt.strategy.kinds import Kind

KIND = Kind.ONE_DEVICE
ROLES: frozenset[str] = frozenset()
AUTO_PRIORITY = 90  # the fallback: asked last


def auto_reason(config, topology) -> str | None:
    if topology.num_gpus == 1:
        return "1 GPU on this host"
    if topology.num_gpus == 0:
        return "no GPU and cpu_replicas < 2"
    return None


def requested_reason(config, topology) -> str:
    plan_lib.refuse_cluster(KIND, topology)
    return "mode=one_device requested"


def plan(config, topology, reasons: list[str]) -> plan_lib.StrategyPlan:
    device = "/gpu:0" if topology.num_gpus else "/cpu:0"
    if config.all_reduce != "auto":
        reasons.append(f"all_reduce={config.all_reduce} unused with one device")
    warnings = []
    if topology.num_gpus and config.cpu_replicas:
        warnings.append(
            f"cpu_replicas={config.cpu_replicas} ignored: {topology.num_gpus} GPU(s) present"
        )
    warnings += plan_lib.inapplicable(config, KIND, None)
    return plan_lib.StrategyPlan(
        kind=KIND,
        devices=(device,),
        all_reduce=None,
        cpu_replicas=0,
        reasons=tuple(reasons),
        warnings=tuple(warnings),
    )


def build(config, plan, topology):
    from tfdist_opt.keras import keras_compat

    return keras_compat.KerasOneDeviceStrategy(plan.devices[0])
