"""Several CPU replicas per worker under `MultiWorkerMirroredStrategy`.

TF's `MultiWorkerMirroredStrategy` runs one replica per GPU, or exactly one
on the CPU (`CollectiveAllReduceExtended._initialize_local_devices` always
picks `CPU:0` on a host without accelerators). `StrategyConfig(replicas=R)`
on W workers needs R / W CPU replicas on each
(`tfdist_opt.strategy.devices.virtual_replicas`): `extended(...)` builds TF's
extended object with that one choice changed to the logical CPU devices
`CPU:0 .. CPU:L-1` (created by `tfdist_opt.strategy.build` before TF's
runtime starts). Everything else, collectives across workers and local
devices included, is TF's own multi-device multi-worker path (the one GPUs
take).
"""

from __future__ import annotations

from tfdist_opt import private_api


class _CpuReplicasExtended(private_api.collective_all_reduce_extended_class()):
    """TF's extended MWMS object with `local` CPU devices on each worker."""

    def __init__(self, container_strategy, cluster_resolver, communication_options, local: int):
        self._local_cpu_replicas = local
        super().__init__(
            container_strategy,
            cluster_resolver=cluster_resolver,
            communication_options=communication_options,
        )

    def _initialize_local_devices(self, cluster_resolver, worker_device):
        devices, kind = super()._initialize_local_devices(cluster_resolver, worker_device)
        if kind != "CPU":
            return devices, kind
        return tuple(
            f"{worker_device}/device:CPU:{i}" for i in range(self._local_cpu_replicas)
        ), kind


def extended(container_strategy, cluster_resolver, communication_options, local: int):
    """TF's `CollectiveAllReduceExtended` with `local` CPU replicas per worker.

    Args:
        container_strategy: the `MultiWorkerMirroredStrategy` being built.
        cluster_resolver: a cluster resolver, or None (TF_CONFIG's).
        communication_options: `tf.distribute.experimental.CommunicationOptions`.
        local: int. CPU replicas on this worker (>= 1); the logical CPU
            devices `CPU:0 .. CPU:local-1` must exist.

    Returns:
        The extended object for `tf.distribute.Strategy.__init__`.
    """
    return _CpuReplicasExtended(container_strategy, cluster_resolver, communication_options, local)
