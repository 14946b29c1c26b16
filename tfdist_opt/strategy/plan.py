"""`plan_strategy()`: the pure decision of which strategy to build, and why.

Takes a `StrategyConfig` and a `Topology`, returns a `StrategyPlan` that
`tfdist_opt.strategy.build` turns into TensorFlow objects. The kind is
chosen by `tfdist_opt.strategy.kinds.select`; each kind's module plans its
own devices and collectives. No TensorFlow import, so every branch is
tested in milliseconds.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

from tfdist_opt.strategy import kinds as kinds_lib
from tfdist_opt.strategy import virtual_replicas
from tfdist_opt.strategy.kinds import Kind

ONE_DEVICE = Kind.ONE_DEVICE
MIRRORED = Kind.MIRRORED
MULTI_WORKER = Kind.MULTI_WORKER
PARAMETER_SERVER = Kind.PARAMETER_SERVER


@dataclasses.dataclass(frozen=True)
class StrategyPlan:
    """What to build.

    Attributes:
        kind: `Kind` (a str enum: `"one_device"`, `"mirrored"`, ...).
        devices: tuple of str. Local replica devices (`/gpu:0`, `/cpu:1`...).
        all_reduce: str or None. Implementation; None when nothing is
            all-reduced.
        cpu_replicas: int. Virtual CPU devices to create (0: none).
        reasons: tuple of str. Why each choice was made, for the log.
        warnings: tuple of str. Settings that do not apply here, said aloud.
        settings: mapping. Kind-specific decisions (e.g. variable
            partitioning), shown by `tfdist-opt info`.
    """

    kind: Kind
    devices: tuple[str, ...]
    all_reduce: str | None
    cpu_replicas: int
    reasons: tuple[str, ...]
    warnings: tuple[str, ...] = ()
    settings: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def num_local_replicas(self) -> int:
        return len(self.devices)

    def describe(self) -> str:
        impl = self.all_reduce or "none"
        return (f"{self.kind} over {', '.join(self.devices)} "
                f"(all-reduce: {impl}); because: " + "; ".join(self.reasons))


def plan_strategy(config, topology) -> StrategyPlan:
    """Decides the strategy for `config` on `topology`.

    Raises:
        ValueError: the config asks for something this topology cannot do
            (NCCL without GPUs, multi-worker without TF_CONFIG, ...).
    """
    reasons: list[str] = []
    kind = kinds_lib.select(config, topology, reasons)
    local = virtual_replicas.local_replicas(
        config.replicas, topology.num_workers, topology.num_gpus, kind.value)
    if local is not None and local > 1 and kind == ONE_DEVICE:
        raise ValueError(
            f"Invalid value for `replicas` with mode 'one_device': one device "
            f"runs one replica. Received: replicas={config.replicas}. Expected "
            "replicas=1 or None, or mode 'auto' or 'mirrored'.")
    return kinds_lib.module(kind).plan(config, topology, reasons)


# ------------------------------------------- shared by the kinds
def refuse_cluster(kind: Kind, topology) -> None:
    """Raises when TF_CONFIG names several tasks: a local kind would train alone."""
    if topology.is_multi_worker:
        raise ValueError(
            f"Invalid value for `mode`: TF_CONFIG names {topology.num_workers} "
            f"tasks, so each would train alone under {kind.value!r}. Received: "
            f"mode={kind.value!r}. Expected 'auto' or a cluster kind (e.g. "
            "'multi_worker'), or unset TF_CONFIG.")


def choose_all_reduce(config, kind: Kind, gpus: int, allowed: Sequence[str],
                      cpu_choice: str, reasons: list[str]) -> str:
    """The collective implementation: `config.all_reduce` checked against `allowed`."""
    asked = config.all_reduce
    if asked == "nccl" and not gpus:
        cpu_options = [a for a in allowed if a != "nccl"]
        raise ValueError(
            "Invalid value for `all_reduce`: NCCL needs GPUs and this host has "
            "none. Received: all_reduce='nccl'. Expected 'auto' or "
            + " or ".join(repr(a) for a in cpu_options) + " on CPU.")
    if asked == "auto":
        if gpus:
            reasons.append("all_reduce=auto: NCCL on GPUs")
            return "nccl"
        reasons.append(f"all_reduce=auto: no GPU, so {cpu_choice} (NCCL needs GPUs)")
        return cpu_choice
    if asked not in allowed:
        raise ValueError(
            f"Invalid value for `all_reduce` with a {kind.value} strategy: "
            f"expected one of {', '.join(repr(a) for a in ('auto', *allowed))}. "
            f"Received: all_reduce={asked!r}")
    reasons.append(f"all_reduce={asked} requested")
    return asked


def inapplicable(config, kind: Kind, all_reduce: str | None) -> list[str]:
    """Warnings for settings that have no effect with this kind / collective."""
    out = []
    multi = kind == MULTI_WORKER
    if config.num_packs != 1 and (
            all_reduce not in ("nccl", "hierarchical_copy") or multi):
        out.append(
            f"num_packs={config.num_packs} has no effect with {kind}/{all_reduce}: "
            "it applies to single-host nccl or hierarchical_copy "
            "(use bytes_per_pack for multi-worker)")
    if isinstance(config.bytes_per_pack, int) and config.bytes_per_pack and not multi:
        out.append(
            f"bytes_per_pack={config.bytes_per_pack} has no effect with {kind}: "
            "it applies to multi-worker collectives (use num_packs on one host)")
    if config.collective_timeout_s is not None and not multi:
        out.append(
            f"collective_timeout_s={config.collective_timeout_s} has no effect "
            f"with {kind}: it applies to multi-worker collectives")
    if config.stall_abort_s and not multi:
        out.append(
            f"stall_abort_s={config.stall_abort_s} has no effect with {kind}: "
            "the stall inspector watches multi-worker fit")
    return out
