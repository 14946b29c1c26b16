"""Kind `parameter_server`: asynchronous training with variables on ps tasks.

Chosen by `mode="auto"` whenever TF_CONFIG has `ps` tasks (or asked for with
`mode="parameter_server"`). The cluster needs exactly one `chief` (the
coordinator, which runs the training loop), one or more `worker`s and one or
more `ps` tasks. On the chief the kind returns a
`tfdist_opt.parameter_server.KerasParameterServerStrategy`; a model built
in its scope trains with `model.fit` (run by
`tfdist_opt.parameter_server.fit`). On a worker or ps task the process
serves (TF server) until the chief finishes and then exits with status 0,
so one script runs on every task.

Variables of at least `2 * ps_min_shard_bytes` bytes are sharded over up to
`ps_max_shards` ps tasks (0: one shard per ps task) with TF's
`MinSizePartitioner`.
"""

from __future__ import annotations

from tfdist_opt.strategy import plan as plan_lib
from tfdist_opt.strategy.kinds import Kind

KIND = Kind.PARAMETER_SERVER
ROLES = frozenset({"chief", "worker", "ps"})
AUTO_PRIORITY = 5  # before multi_worker: a ps task means PS training


def _counts(topology) -> dict[str, int]:
    cluster = topology.tf_config["cluster"] if topology.tf_config else {}
    return {r: len(cluster.get(r, [])) for r in ("chief", "worker", "ps")}


def auto_reason(config, topology) -> str | None:
    counts = _counts(topology)
    if counts["ps"]:
        return (
            f"TF_CONFIG has {counts['ps']} ps task(s), {counts['worker']} "
            f"worker(s) and {counts['chief']} chief"
        )
    return None


def requested_reason(config, topology) -> str:
    if topology.tf_config is None:
        raise ValueError(
            "Invalid value for `mode`: parameter_server needs a TF_CONFIG with "
            "chief, worker and ps tasks, and none is set. Received: "
            "mode='parameter_server', TF_CONFIG unset. Expected a cluster, e.g. "
            "`tfdist-opt launch --workers 2 --ps 2 -- python train.py`."
        )
    return f"mode=parameter_server requested; {auto_reason(config, topology) or 'no ps'}"


def check_counts(counts) -> None:
    """Raises a ValueError naming each bad role count."""
    bad = []
    if counts.get("chief", 0) != 1:
        bad.append(f"chief={counts.get('chief', 0)} (expected exactly 1: the coordinator)")
    if counts.get("worker", 0) < 1:
        bad.append(f"worker={counts.get('worker', 0)} (expected at least 1)")
    if counts.get("ps", 0) < 1:
        bad.append(f"ps={counts.get('ps', 0)} (expected at least 1)")
    if bad:
        raise ValueError(
            "Invalid TF_CONFIG for a parameter_server strategy: bad task counts. "
            f"Received: {', '.join(bad)}."
        )


def plan(config, topology, reasons: list[str]) -> plan_lib.StrategyPlan:
    counts = _counts(topology)
    check_counts(counts)
    if config.grad_accum > 1 or config.compression != "none":
        raise ValueError(
            "Invalid value for `grad_accum`/`compression` with mode parameter_server: "
            "workers push each step's gradients to the ps tasks asynchronously; there "
            f"is no all-reduce to accumulate or compress. Received: grad_accum="
            f"{config.grad_accum}, compression={config.compression!r}. Expected 1 and 'none'."
        )
    if getattr(config, "shard_optimizer_state", False):
        raise ValueError(
            "Invalid value for `shard_optimizer_state` with mode parameter_server: "
            "the ps tasks already hold each variable and its optimizer state once "
            "(sharded over ps tasks by ps_max_shards); workers keep none. Received: "
            "shard_optimizer_state=True. Expected False."
        )
    max_shards = config.ps_max_shards or counts["ps"]
    settings = {
        "task": f"{topology.task_type}:{topology.task_index}",
        "counts": counts,
        "variable_partitioning": (
            "off (ps_max_shards=1)"
            if max_shards <= 1
            else f"variables of >= {2 * config.ps_min_shard_bytes} bytes cut into shards of "
            f">= {config.ps_min_shard_bytes} bytes, at most {max_shards} shards "
            f"(MinSizePartitioner; ps_min_shard_bytes, ps_max_shards)"
        ),
        "min_shard_bytes": config.ps_min_shard_bytes,
        "max_shards": max_shards,
        "role": (
            "coordinator: runs model.fit (tfdist_opt.parameter_server.fit)"
            if topology.task_type == "chief"
            else "serves until the chief finishes, then exits 0"
        ),
    }
    warnings = plan_lib.inapplicable(config, KIND, None)
    if config.all_reduce != "auto":
        warnings.append(
            f"all_reduce={config.all_reduce} has no effect with "
            "parameter_server: nothing is all-reduced"
        )
    gpus = topology.num_gpus
    devices = tuple(f"/gpu:{i}" for i in range(gpus)) or ("/cpu:0",)
    return plan_lib.StrategyPlan(
        kind=KIND,
        devices=devices,
        all_reduce=None,
        cpu_replicas=0,
        reasons=tuple(reasons),
        warnings=tuple(warnings),
        settings=settings,
    )


def build(config, plan, topology):
    import tensorflow as tf

    from tfdist_opt.cluster import tf_config as tf_config_lib
    from tfdist_opt.parameter_server import cluster as cluster_lib
    from tfdist_opt.parameter_server import faults
    from tfdist_opt.parameter_server import serving
    from tfdist_opt.parameter_server import strategy as strategy_lib

    if topology.task_type in ("worker", "ps"):
        serving.serve(topology.tf_config, config.startup_timeout_s)  # exits
    faults.install_excepthook()
    # The evaluator is not part of the training cluster: left in, the
    # coordinator waits for a server the side-car evaluator never starts.
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(tf_config_lib.training_cluster(topology.tf_config)),
        task_type=topology.task_type,
        task_id=topology.task_index,
        rpc_layer=topology.tf_config.get("rpc_layer") or "grpc",
    )
    return strategy_lib.KerasParameterServerStrategy(
        resolver,
        variable_partitioner=cluster_lib.partitioner(
            plan.settings["min_shard_bytes"], plan.settings["max_shards"]
        ),
    )
