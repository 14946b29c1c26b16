"""Kind `multi_worker`: `KerasMultiWorkerMirroredStrategy` over a TF_CONFIG cluster.

One replica per GPU (or the CPU; with `replicas=R`, R / W logical CPU
replicas, `tfdist_opt.strategy.devices.worker_cpu_replicas`) on every chief/worker
task; gradients are all-reduced with NCCL (GPUs) or RING (CPU) collectives. The strategy is
TF's `MultiWorkerMirroredStrategy` with the `reduce` fix Keras 3 needs
(`tfdist_opt.keras.keras_compat`).
"""

from __future__ import annotations

from tfdist_opt.strategy import plan as plan_lib
from tfdist_opt.strategy.devices import virtual_replicas
from tfdist_opt.strategy.kinds import Kind

KIND = Kind.MULTI_WORKER
ROLES = frozenset({"chief", "worker"})
AUTO_PRIORITY = 10
ALL_REDUCE = ("nccl", "ring")


def auto_reason(config, topology) -> str | None:
    if topology.is_multi_worker:
        return f"TF_CONFIG has {topology.num_workers} tasks"
    return None


def requested_reason(config, topology) -> str:
    if topology.tf_config is None:
        raise ValueError(
            "Invalid value for `mode`: multi_worker needs a TF_CONFIG "
            "naming the cluster, and none is set. Received: "
            "mode='multi_worker', TF_CONFIG unset. Set TF_CONFIG (see "
            "`tfdist-opt tf-config`) or start with `tfdist-opt launch`."
        )
    return f"mode=multi_worker requested; TF_CONFIG has {topology.num_workers} task(s)"


def plan(config, topology, reasons: list[str]) -> plan_lib.StrategyPlan:
    local = virtual_replicas.local_replicas(
        config.replicas, topology.num_workers, topology.num_gpus, KIND.value
    )
    if config.cpu_replicas > 1:
        raise ValueError(
            "Invalid value for `cpu_replicas` with mode multi_worker: "
            "MultiWorkerMirroredStrategy runs one CPU replica per worker. "
            f"Received: cpu_replicas={config.cpu_replicas}. Expected 0 or 1 "
            "(start more workers instead, e.g. `tfdist-opt launch -n N`, or "
            "set `replicas`: a replica count split over the workers)."
        )
    gpus = topology.num_gpus
    devices = tuple(f"/gpu:{i}" for i in range(gpus)) or tuple(
        f"/cpu:{i}" for i in range(local or 1)
    )
    if local is not None:
        reasons.append(
            f"replicas={config.replicas} on {topology.num_workers} "
            f"worker(s): {local} logical CPU replica(s) each"
        )
    all_reduce = plan_lib.choose_all_reduce(
        config,
        KIND,
        gpus,
        ALL_REDUCE,
        cpu_choice="ring",
        reasons=reasons,
        split_gpus=topology.split_gpus,
        split_choice="ring",
    )
    warnings = plan_lib.inapplicable(config, KIND, all_reduce)
    return plan_lib.StrategyPlan(
        kind=KIND,
        devices=devices,
        all_reduce=all_reduce,
        cpu_replicas=local if local and local > 1 else 0,
        reasons=tuple(reasons),
        warnings=tuple(warnings),
    )


def communication_options(config, plan):
    """`tf.distribute.experimental.CommunicationOptions` for the collectives.

    No `timeout_seconds`: TF's starts one OS thread per collective that
    sleeps out the whole timeout (one per gradient pack per step, alive for
    `collective_timeout_s`); the stall inspector's thread enforces
    `collective_timeout_s` in `fit` instead (`tfdist_opt.stall.inspector`).
    """
    import tensorflow as tf

    impl = tf.distribute.experimental.CommunicationImplementation
    bpp = config.bytes_per_pack
    return tf.distribute.experimental.CommunicationOptions(
        bytes_per_pack=bpp if isinstance(bpp, int) else 0,
        implementation=impl.NCCL if plan.all_reduce == "nccl" else impl.RING,
    )


# TF's experimental.recv_buf_max_chunk: negative sends each chunk whole
# (DTensor's multi-client setup sets the same).
RECV_BUF_MAX_CHUNK = -1


def build(config, plan, topology):
    from tfdist_opt import _logging
    from tfdist_opt import private_api
    from tfdist_opt.coordination import faults
    from tfdist_opt.cluster import ports
    from tfdist_opt.coordination import startup_guard
    from tfdist_opt.stall import keras_binding as stall_binding
    from tfdist_opt.strategy.devices import cpu_split
    from tfdist_opt.strategy.devices import host_memory
    from tfdist_opt.keras import keras_compat
    from tfdist_opt.strategy.kinds import _server

    if _server.already_running(topology.tf_config):
        # Our own server from an earlier opt_strategy(): its port is taken
        # by us and its peers are up; a second strategy reuses it, then waits
        # for every task's (see _server: a peer's early collective otherwise
        # hangs both tasks).
        strategy = keras_compat.KerasMultiWorkerMirroredStrategy(
            communication_options=communication_options(config, plan),
            local_cpu_replicas=plan.cpu_replicas,
        )
        _rendezvous(_server.rendezvous_id(), config.startup_timeout_s)
        stall_binding.attach(strategy, config, topology.tf_config)
        return strategy
    # Pre-flight: a taken port fails here, naming the port and the task,
    # instead of as a gRPC bind error deep inside TF.
    ports.check_own_port(topology.tf_config)
    faults.install_excepthook(topology.tf_config, config.collective_timeout_s)
    # Before TF's runtime starts: the pools are sized when it does.
    split = cpu_split.detect(config.cpu_split, topology.tf_config)
    missed = cpu_split.apply(split)
    _logging.log_once(
        f"tfdist_opt: CPU threads: {split.reason}"
        + (f" (not applied: {'; '.join(missed)})" if missed else "")
    )
    # One string per collective chunk in gRPC's RecvBuf responses instead of
    # TF's default 4 KB pieces (0): fewer copies on the CPU-bound path.
    private_api.set_recv_buf_max_chunk(RECV_BUF_MAX_CHUNK)
    if config.tune_malloc and host_memory.tune_for_collectives():
        _logging.log_once(
            "tfdist_opt: glibc malloc tuned for collectives (mmap threshold "
            "32 MiB, trim 1 GiB; tune_malloc=False to keep the defaults)"
        )
    try:
        # Bounded wait for peers (TF's own default is one hour).
        with startup_guard.StartupGuard(topology.tf_config, config.startup_timeout_s):
            strategy = keras_compat.KerasMultiWorkerMirroredStrategy(
                communication_options=communication_options(config, plan),
                local_cpu_replicas=plan.cpu_replicas,
            )
        _server.mark_started(topology.tf_config)
        # The stall inspector's settings and input marker (tfdist_opt.stall).
        stall_binding.attach(strategy, config, topology.tf_config)
        return strategy
    except RuntimeError as e:
        if "configured at program startup" in str(e) or "initialized" in str(e):
            raise RuntimeError(
                "opt_strategy() must run before any other TensorFlow op when "
                "building a multi-worker strategy (collective ops are "
                f"configured at program startup). TensorFlow said: {e}"
            ) from e
        raise


def _rendezvous(barrier_id: str, timeout_s: float) -> None:
    from tfdist_opt.coordination import kv_store

    if not kv_store.TFKeyValueStore().barrier(barrier_id, timeout_s):
        raise RuntimeError(
            f"A repeated opt_strategy() waited {timeout_s:g} s "
            f"(startup_timeout_s) at barrier {barrier_id!r} for the other "
            "tasks' matching call. Expected every task of the cluster to build "
            "the same number of strategies, in the same order."
        )
