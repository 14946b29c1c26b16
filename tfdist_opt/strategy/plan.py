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

from tfdist_opt import versions
from tfdist_opt.gradients import gradient_plan
from tfdist_opt.gradients.options import GradientOptions
from tfdist_opt.strategy.devices import cpu_split
from tfdist_opt.strategy import kinds as kinds_lib
from tfdist_opt.strategy.devices import virtual_replicas
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
        gpu_memory_growth: bool or None. Whether `opt_strategy()` turns on
            memory growth on the GPUs; None without GPUs (see
            `gpu_memory_choice`).
        gpu_memory: str. Why, in words ("" without GPUs).
        gradients: `tfdist_opt.gradients.gradient_plan.GradientPlan` or
            None. The gradient path the strategy attaches, and why (set by
            `plan_strategy`).
    """

    kind: Kind
    devices: tuple[str, ...]
    all_reduce: str | None
    cpu_replicas: int
    reasons: tuple[str, ...]
    warnings: tuple[str, ...] = ()
    settings: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    gpu_memory_growth: bool | None = None
    gpu_memory: str = ""
    gradients: gradient_plan.GradientPlan | None = None

    @property
    def num_local_replicas(self) -> int:
        return len(self.devices)

    def describe(self) -> str:
        impl = self.all_reduce or "none"
        return (
            f"{self.kind} over {', '.join(self.devices)} "
            f"(all-reduce: {impl}); because: " + "; ".join(self.reasons)
        )


def plan_strategy(
    config, topology, gradients: GradientOptions | None = None, legacy_keras: bool | None = None
) -> StrategyPlan:
    """Decides the strategy for `config` on `topology`, its gradient path included.

    Args:
        config: `StrategyConfig`.
        topology: `Topology`.
        gradients: `GradientOptions` or None. The gradient settings with
            the user's stages (`opt_strategy(gradient_stages=...)`); None:
            `GradientOptions.from_config(config)`.
        legacy_keras: bool or None. tf_keras (`TF_USE_LEGACY_KERAS=1`);
            None reads the environment (`versions.uses_legacy_keras`).

    Raises:
        ValueError: the config asks for something this topology cannot do
            (NCCL without GPUs, multi-worker without TF_CONFIG, ...), or a
            Keras 3-only gradient setting under tf_keras.
    """
    reasons: list[str] = []
    kind = kinds_lib.select(config, topology, reasons)
    local = virtual_replicas.local_replicas(
        config.replicas, topology.num_workers, topology.num_gpus, kind.value
    )
    if local is not None and local > 1 and kind == ONE_DEVICE:
        raise ValueError(
            f"Invalid value for `replicas` with mode 'one_device': one device "
            f"runs one replica. Received: replicas={config.replicas}. Expected "
            "replicas=1 or None, or mode 'auto' or 'mirrored'."
        )
    plan = kinds_lib.module(kind).plan(config, topology, reasons)
    growth, why, memory_warnings = gpu_memory_choice(config, topology)
    if topology.split_gpus and plan.all_reduce == "nccl":
        memory_warnings.append(
            f"all_reduce=nccl over {topology.split_gpus} GPU(s) split into "
            "logical devices: NCCL refuses two ranks on one physical GPU "
            "('Duplicate GPU detected'); all_reduce=auto chooses another "
            "implementation there"
        )
    if legacy_keras is None:
        legacy_keras = versions.uses_legacy_keras()
    if gradients is None:
        gradients = GradientOptions.from_config(config)
    gradients = gradient_plan.plan_gradients(
        gradients,
        kind.value,
        plan.all_reduce,
        legacy_keras,
        config.collective_streams,
    )
    return dataclasses.replace(
        plan,
        gpu_memory_growth=growth,
        gpu_memory=why,
        warnings=plan.warnings + gradients.warnings + tuple(memory_warnings),
        gradients=gradients,
    )


def gpu_memory_choice(config, topology) -> tuple[bool | None, str, list[str]]:
    """Memory growth on this process's GPUs: (on?, why, warnings).

    The policy: memory growth is on by default (`gpu_memory_growth=True`)
    whatever the topology. TF's own default maps nearly all of a GPU's
    memory into the first process that touches it, which helps only a
    process that owns its GPUs alone, and then by little (the allocator
    grows in chunks and keeps them). With growth on, several processes
    on one GPU (two workers of `launch -n 2` that see the same GPUs, the
    side-car evaluator beside a worker, a second job) each take what they
    use instead of the second one failing with out-of-memory. A GPU the
    user split into logical devices with memory limits keeps them: TF
    refuses memory growth there, and the limits already bound the memory.

    Pure: no TensorFlow.

    Returns:
        (None, "", []) without GPUs; otherwise (bool, reason, warnings).
    """
    if not topology.num_gpus:
        return None, "", []
    if topology.configured_gpus:
        return (
            False,
            (
                f"memory growth off: {topology.configured_gpus} GPU(s) have logical "
                "devices with memory limits set (TF refuses growth there; the "
                "limits bound each device)"
            ),
            [],
        )
    tasks = cpu_split.local_tasks(topology.tf_config)[0] if topology.tf_config is not None else 1
    sharing = (
        f"{tasks} training tasks on this host" if tasks > 1 else "one training task on this host"
    )
    if config.gpu_memory_growth:
        return (
            True,
            (
                f"memory growth on (gpu_memory_growth=True; {sharing}): "
                "each process takes GPU memory as it needs it, so processes "
                "that see the same GPU can share it"
            ),
            [],
        )
    warnings = []
    if tasks > 1:
        warnings.append(
            f"gpu_memory_growth=False with {tasks} training tasks on this "
            "host: a task takes nearly all the memory of every GPU it sees, so "
            "tasks that see the same GPU fail with out-of-memory. Give each "
            "task its own GPUs (tfdist-opt launch --gpus-per-worker K) or keep "
            "gpu_memory_growth=True"
        )
    return (
        False,
        (
            f"memory growth off (gpu_memory_growth=False; {sharing}): TensorFlow "
            "maps nearly all GPU memory when it starts"
        ),
        warnings,
    )


# ------------------------------------------- shared by the kinds
def refuse_cluster(kind: Kind, topology) -> None:
    """Raises when TF_CONFIG names several tasks: a local kind would train alone."""
    if topology.is_multi_worker:
        raise ValueError(
            f"Invalid value for `mode`: TF_CONFIG names {topology.num_workers} "
            f"tasks, so each would train alone under {kind.value!r}. Received: "
            f"mode={kind.value!r}. Expected 'auto' or a cluster kind (e.g. "
            "'multi_worker'), or unset TF_CONFIG."
        )


def choose_all_reduce(
    config,
    kind: Kind,
    gpus: int,
    allowed: Sequence[str],
    cpu_choice: str,
    reasons: list[str],
    split_gpus: int = 0,
    split_choice: str | None = None,
) -> str:
    """The collective implementation: `config.all_reduce` checked against `allowed`.

    `auto` is NCCL on GPUs, except where `split_gpus` GPUs were split into
    logical devices: NCCL refuses two ranks on one physical GPU, so
    `split_choice` there.
    """
    asked = config.all_reduce
    if asked == "nccl" and not gpus:
        cpu_options = [a for a in allowed if a != "nccl"]
        raise ValueError(
            "Invalid value for `all_reduce`: NCCL needs GPUs and this host has "
            "none. Received: all_reduce='nccl'. Expected 'auto' or "
            + " or ".join(repr(a) for a in cpu_options)
            + " on CPU."
        )
    if asked == "auto":
        if gpus and split_gpus and split_choice:
            reasons.append(
                f"all_reduce=auto: {split_gpus} GPU(s) split into logical "
                "devices, and NCCL refuses two ranks on one physical GPU, so "
                f"{split_choice}"
            )
            return split_choice
        if gpus:
            reasons.append("all_reduce=auto: NCCL on GPUs")
            return "nccl"
        reasons.append(f"all_reduce=auto: no GPU, so {cpu_choice} (NCCL needs GPUs)")
        return cpu_choice
    if asked not in allowed:
        raise ValueError(
            f"Invalid value for `all_reduce` with a {kind.value} strategy: "
            f"expected one of {', '.join(repr(a) for a in ('auto', *allowed))}. "
            f"Received: all_reduce={asked!r}"
        )
    reasons.append(f"all_reduce={asked} requested")
    return asked


def inapplicable(config, kind: Kind, all_reduce: str | None) -> list[str]:
    """Warnings for settings that have no effect with this kind / collective."""
    out = []
    multi = kind == MULTI_WORKER
    if config.num_packs != 1 and (all_reduce not in ("nccl", "hierarchical_copy") or multi):
        out.append(
            f"num_packs={config.num_packs} has no effect with {kind}/{all_reduce}: "
            "it applies to single-host nccl or hierarchical_copy "
            "(use bytes_per_pack for multi-worker)"
        )
    if isinstance(config.bytes_per_pack, int) and config.bytes_per_pack and not multi:
        out.append(
            f"bytes_per_pack={config.bytes_per_pack} has no effect with {kind}: "
            "it applies to multi-worker collectives (use num_packs on one host)"
        )
    streams = config.collective_streams
    if streams not in ("auto", 0) and (not multi or all_reduce != "ring"):
        out.append(
            f"collective_streams={streams} has no effect with {kind}/{all_reduce}: "
            "it applies to multi-worker RING collectives (NCCL keeps TF's "
            "ordered packs)"
        )
    if config.collective_timeout_s is not None and not multi:
        out.append(
            f"collective_timeout_s={config.collective_timeout_s} has no effect "
            f"with {kind}: it applies to multi-worker collectives"
        )
    if config.stall_abort_s and not multi:
        out.append(
            f"stall_abort_s={config.stall_abort_s} has no effect with {kind}: "
            "the stall inspector watches multi-worker fit"
        )
    return out
