"""`plan_strategy()`: the pure decision of which strategy to build, and why.

Takes a `StrategyConfig` and a `Topology`, returns a `StrategyPlan` that
`tfdist_opt.strategy` turns into TensorFlow objects. No TensorFlow import,
so every branch is tested in milliseconds.
"""

from __future__ import annotations

import dataclasses

from tfdist_opt.config import StrategyConfig
from tfdist_opt.topology import Topology

ONE_DEVICE = "one_device"
MIRRORED = "mirrored"
MULTI_WORKER = "multi_worker"

_MIRRORED_IMPLS = ("nccl", "hierarchical_copy", "reduce_to_one")
_MULTI_WORKER_IMPLS = ("nccl", "ring")


@dataclasses.dataclass(frozen=True)
class StrategyPlan:
    """What to build.

    Attributes:
        kind: str. `"one_device"`, `"mirrored"` or `"multi_worker"`.
        devices: tuple of str. Local replica devices (`/gpu:0`, `/cpu:1`...).
        all_reduce: str or None. Implementation; None for one device.
        cpu_replicas: int. Virtual CPU devices to create (0: none).
        reasons: tuple of str. Why each choice was made, for the log.
        warnings: tuple of str. Settings that do not apply here, said aloud.
    """

    kind: str
    devices: tuple[str, ...]
    all_reduce: str | None
    cpu_replicas: int
    reasons: tuple[str, ...]
    warnings: tuple[str, ...] = ()

    @property
    def num_local_replicas(self) -> int:
        return len(self.devices)

    def describe(self) -> str:
        impl = self.all_reduce or "none"
        return (f"{self.kind} over {', '.join(self.devices)} "
                f"(all-reduce: {impl}); because: " + "; ".join(self.reasons))


def plan_strategy(config: StrategyConfig, topology: Topology) -> StrategyPlan:
    """Decides the strategy for `config` on `topology`.

    Raises:
        ValueError: the config asks for something this topology cannot do
            (NCCL without GPUs, multi-worker without TF_CONFIG, ...).
    """
    reasons: list[str] = []
    warnings: list[str] = []
    gpus = topology.num_gpus
    kind = _choose_kind(config, topology, reasons)

    if kind == MULTI_WORKER:
        devices = tuple(f"/gpu:{i}" for i in range(gpus)) or ("/cpu:0",)
        cpu_replicas = 0
        if config.cpu_replicas > 1:
            raise ValueError(
                "Invalid value for `cpu_replicas` with mode multi_worker: "
                "MultiWorkerMirroredStrategy runs one CPU replica per worker. "
                f"Received: cpu_replicas={config.cpu_replicas}. Expected 0 or 1 "
                "(start more workers instead, e.g. `tfdist-opt launch -n N`).")
    elif gpus:
        devices = tuple(f"/gpu:{i}" for i in range(gpus if kind == MIRRORED else 1))
        cpu_replicas = 0
        if config.cpu_replicas:
            warnings.append(
                f"cpu_replicas={config.cpu_replicas} ignored: {gpus} GPU(s) present")
    else:
        n = config.cpu_replicas if kind == MIRRORED else 1
        devices = tuple(f"/cpu:{i}" for i in range(max(1, n)))
        cpu_replicas = config.cpu_replicas if kind == MIRRORED else 0

    all_reduce = _choose_all_reduce(config, kind, gpus, reasons)
    _check_packing(config, kind, all_reduce, warnings)
    return StrategyPlan(kind=kind, devices=devices, all_reduce=all_reduce,
                        cpu_replicas=cpu_replicas, reasons=tuple(reasons),
                        warnings=tuple(warnings))


def _choose_kind(config: StrategyConfig, topology: Topology,
                 reasons: list[str]) -> str:
    mode = config.mode
    n_tasks = topology.num_workers
    if mode == "multi_worker":
        if topology.tf_config is None:
            raise ValueError(
                "Invalid value for `mode`: multi_worker needs a TF_CONFIG "
                "naming the cluster, and none is set. Received: "
                "mode='multi_worker', TF_CONFIG unset. Set TF_CONFIG (see "
                "`tfdist-opt tf-config`) or start with `tfdist-opt launch`.")
        reasons.append(f"mode=multi_worker requested; TF_CONFIG has {n_tasks} task(s)")
        return MULTI_WORKER
    if mode in ("one_device", "mirrored") and topology.is_multi_worker:
        raise ValueError(
            f"Invalid value for `mode`: TF_CONFIG names {n_tasks} tasks, so "
            f"each would train alone under {mode!r}. Received: mode={mode!r}. "
            "Expected 'auto' or 'multi_worker' (or unset TF_CONFIG).")
    if mode == "one_device":
        reasons.append("mode=one_device requested")
        return ONE_DEVICE
    if mode == "mirrored":
        reasons.append("mode=mirrored requested")
        return MIRRORED
    # auto
    if topology.is_multi_worker:
        reasons.append(f"TF_CONFIG has {n_tasks} tasks")
        return MULTI_WORKER
    if topology.num_gpus >= 2:
        reasons.append(f"{topology.num_gpus} GPUs on this host")
        return MIRRORED
    if topology.num_gpus == 1:
        reasons.append("1 GPU on this host")
        return ONE_DEVICE
    if config.cpu_replicas >= 2:
        reasons.append(f"no GPU; cpu_replicas={config.cpu_replicas} virtual CPU devices")
        return MIRRORED
    reasons.append("no GPU and cpu_replicas < 2")
    return ONE_DEVICE


def _choose_all_reduce(config: StrategyConfig, kind: str, gpus: int,
                       reasons: list[str]) -> str | None:
    asked = config.all_reduce
    if kind == ONE_DEVICE:
        if asked != "auto":
            reasons.append(f"all_reduce={asked} unused with one device")
        return None
    if asked == "nccl" and not gpus:
        raise ValueError(
            "Invalid value for `all_reduce`: NCCL needs GPUs and this host has "
            "none. Received: all_reduce='nccl'. Expected 'auto' or "
            + ("'ring'" if kind == MULTI_WORKER else "'reduce_to_one' or "
               "'hierarchical_copy'") + " on CPU.")
    allowed = _MULTI_WORKER_IMPLS if kind == MULTI_WORKER else _MIRRORED_IMPLS
    if asked == "auto":
        if gpus:
            choice = "nccl"
            reasons.append("all_reduce=auto: NCCL on GPUs")
        else:
            choice = "ring" if kind == MULTI_WORKER else "reduce_to_one"
            reasons.append(f"all_reduce=auto: no GPU, so {choice} (NCCL needs GPUs)")
        return choice
    if asked not in allowed:
        raise ValueError(
            f"Invalid value for `all_reduce` with a {kind} strategy: expected one "
            f"of {', '.join(repr(a) for a in ('auto',) + allowed)}. "
            f"Received: all_reduce={asked!r}")
    reasons.append(f"all_reduce={asked} requested")
    return asked


def _check_packing(config: StrategyConfig, kind: str, all_reduce: str | None,
                   warnings: list[str]) -> None:
    if config.num_packs != 1 and all_reduce not in ("nccl", "hierarchical_copy") or (
            config.num_packs != 1 and kind == MULTI_WORKER):
        warnings.append(
            f"num_packs={config.num_packs} has no effect with {kind}/{all_reduce}: "
            "it applies to single-host nccl or hierarchical_copy "
            "(use bytes_per_pack for multi-worker)")
    if isinstance(config.bytes_per_pack, int) and config.bytes_per_pack and (
            kind != MULTI_WORKER):
        warnings.append(
            f"bytes_per_pack={config.bytes_per_pack} has no effect with {kind}: "
            "it applies to multi-worker collectives (use num_packs on one host)")
    if config.collective_timeout_s is not None and kind != MULTI_WORKER:
        warnings.append(
            f"collective_timeout_s={config.collective_timeout_s} has no effect "
            f"with {kind}: it applies to multi-worker collectives")
