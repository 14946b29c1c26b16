"""`GradientPlan`: which gradient path runs, with which stages, and why.

Pure Python (no TensorFlow import). The one place that decides, from the
resolved `GradientOptions` (made from a `StrategyConfig` and the user's
stages) and what the strategy plan chose (kind, collective implementation,
Keras flavour):

* whether Keras 3 optimizers are hooked at all (`path == "tf"`: TF's own
  all-reduce does everything, nothing is wrapped);
* which path a hooked optimizer's gradients take (`PATHS`): the chain in
  the replica context each step, accumulation (one cross-replica
  all-reduce every k micro-steps) or the sharded update (ZeRO-1);
* how many streamed pieces are in flight (`collective_streams`);
* the chain of stages, in order;
* which settings cannot run here (tf_keras refuses the Keras 3 hooks).

`tfdist_opt.strategy.plan.plan_strategy` computes it once per strategy
(`StrategyPlan.gradients`); `tfdist_opt.strategy.build` attaches it,
`tfdist-opt info` prints it, and every other reader asks it (`plan_of`
for a `GradientOptions` made by hand, e.g. a benchmark's).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tfdist_opt.gradients.stages import combine

# What each path does with a step's gradients.
PATHS = {
    "tf": "TF's own all-reduce (CommunicationOptions); optimizers are not hooked",
    "replica": "the hooked optimizer runs the chain in the replica context every step",
    "accumulation": "gradients accumulate locally; every k-th micro-step the chain's "
    "wire, pack and collective stages run once, from the cross-replica context",
    "zero": "local stages, then a reduce-scatter, the sharded update and an all-gather (ZeRO-1)",
}
# collective_streams="auto": two pieces in flight kept a 1 Gbit/s link
# busiest in the link-speed benchmark (more did not help).
AUTO_STREAMS = 2


@dataclasses.dataclass(frozen=True)
class GradientPlan:
    """The gradient path a strategy's hooked optimizers run (see module doc).

    Attributes:
        options: `GradientOptions`, resolved: what the TensorFlow code reads
            (`hooked` and `collective_streams` set by this plan).
        chain: `combine.Chain`. The stages, in order, the collective
            included.
        path: str. One of `PATHS`.
        reasons: tuple of str. Why each choice (path, streams) was made.
        warnings: tuple of str. Settings that have no effect here.
    """

    options: Any
    chain: combine.Chain
    path: str
    reasons: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    @property
    def hooked(self) -> bool:
        """Whether Keras 3 optimizers created in the scope are hooked."""
        return self.path != "tf"

    @property
    def streams(self) -> int:
        """Streamed pieces in flight (0: one collective per pack)."""
        return self.options.collective_streams

    def describe(self) -> str:
        """One line: the path, the stages in order, and why."""
        stages = self.chain.describe() if self.hooked else "none"
        return f"{self.path}: {PATHS[self.path]}; stages: {stages}; because: " + "; ".join(
            self.reasons
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable (`tfdist-opt info --json`)."""
        return {
            "path": self.path,
            "what": PATHS[self.path],
            "hooked": self.hooked,
            "stages": [s.describe() for s in self.chain.stages] if self.hooked else [],
            "streams": self.streams,
            "why": list(self.reasons),
            "warnings": list(self.warnings),
        }


def plan_of(options, reasons: tuple[str, ...] = (), warnings: tuple[str, ...] = ()):
    """The plan `options` (a `GradientOptions`) stand for, on their own.

    Every plan is made here, so the path has one definition: not hooked
    when nothing needs the hooks (`hook_causes`), else the sharded update
    (`shard_optimizer_state`), accumulation (`grad_accum > 1`) or the
    replica-context chain, in that order.
    """
    causes = hook_causes(options)
    if not causes:
        path = "tf"
        why = "not hooked: TF's own all-reduce does everything these settings ask"
    else:
        path = (
            "zero"
            if options.shard_optimizer_state
            else "accumulation"
            if options.grad_accum > 1
            else "replica"
        )
        why = "hooked (" + ", ".join(causes) + ")"
    return GradientPlan(
        options=options,
        chain=options.chain(),
        path=path,
        reasons=(why, *reasons),
        warnings=tuple(warnings),
    )


def hook_causes(options) -> list[str]:
    """The settings of `options` that need tfdist_opt's hooks (empty: none).

    An int `bytes_per_pack` alone needs none: TF takes it as
    `CommunicationOptions(bytes_per_pack=...)`, unless `via_hook` asks
    tfdist_opt's packing to run it.
    """
    causes = []
    if options.hooked:
        causes.append("hooked=True")
    if options.compression != "none":
        causes.append(f"compression={options.compression!r}")
    if options.grad_accum != 1:
        causes.append(f"grad_accum={options.grad_accum}")
    bpp = options.bytes_per_pack
    if bpp == "auto" or (options.via_hook and bpp != 0):
        causes.append(f"bytes_per_pack={bpp!r}" + (" (via_hook)" if bpp != "auto" else ""))
    if options.shard_optimizer_state:
        causes.append("shard_optimizer_state=True")
    if options.stages:
        causes.append("gradient stages " + ", ".join(s.name for s in options.stages))
    return causes


def plan_gradients(
    options, kind: str, all_reduce: str | None, legacy_keras: bool, streams: int | str = 0
) -> GradientPlan:
    """The plan of a strategy of `kind` for `options` (from its config).

    Multi-worker with Keras 3 hooks even at the defaults (`hooked`): the
    optimizer's update is fused, and with RING the gradients travel as
    streamed pieces (`streams`, `"auto"`: `AUTO_STREAMS`), the same sum of
    the same float32 values. With tf_keras nothing is hooked, and a
    setting that needs the hooks is refused.

    Args:
        options: `GradientOptions` made from the config and the user's stages.
        kind: str. The strategy kind (`"multi_worker"`, ...).
        all_reduce: str or None. The collective implementation chosen.
        legacy_keras: bool. `TF_USE_LEGACY_KERAS=1` (tf_keras).
        streams: int or `"auto"`. The `collective_streams` setting.

    Raises:
        ValueError: tf_keras with a setting only the Keras 3 hooks run.
    """
    if legacy_keras:
        _refuse_under_tf_keras(options)
        return plan_of(options, reasons=("tf_keras (TF_USE_LEGACY_KERAS=1): no hooks",))
    if str(kind) != "multi_worker":
        return plan_of(options)
    resolved, why, warning = _streams(options, all_reduce, streams)
    options = dataclasses.replace(options, hooked=True, collective_streams=resolved)
    return plan_of(
        options,
        reasons=("multi-worker with Keras 3: the update is fused", why),
        warnings=(warning,) if warning else (),
    )


def _streams(options, all_reduce, asked) -> tuple[int, str, str | None]:
    """(pieces in flight, why, a warning or None) on a multi-worker strategy."""
    if all_reduce != "ring":
        return 0, f"collective_streams: 0 with {all_reduce} (its launcher keeps the order)", None
    bypassed = _streams_bypassed(options)
    if asked != "auto":
        warning = None
        if asked and bypassed:
            warning = (
                f"collective_streams={asked} has no effect with {bypassed}: "
                "that gradient path runs its own collectives"
            )
        return asked, f"collective_streams={asked} requested", warning
    if options.bytes_per_pack != 0:
        return (
            0,
            f"collective_streams=auto: 0, packs of bytes_per_pack={options.bytes_per_pack!r}",
            None,
        )
    if bypassed:
        return 0, f"collective_streams=auto: 0, {bypassed} runs its own collectives", None
    return (
        AUTO_STREAMS,
        f"collective_streams=auto: {AUTO_STREAMS} pieces in flight (RING, bytes_per_pack=0)",
        None,
    )


def _streams_bypassed(options) -> str | None:
    """The setting whose gradient path runs no streamed pieces, or None."""
    if options.compression == "powersgd":
        return "compression='powersgd'"
    if options.grad_accum > 1:
        return f"grad_accum={options.grad_accum}"
    if options.shard_optimizer_state:
        return "shard_optimizer_state=True"
    return None


def _refuse_under_tf_keras(options) -> None:
    """The gradient hooks exist for Keras 3 only: refuse, never ignore."""
    keras3_only = {
        "gradient_stages": (options.stages, ()),
        "grad_accum": (options.grad_accum, 1),
        "compression": (options.compression, "none"),
        "shard_optimizer_state": (options.shard_optimizer_state, False),
    }
    if options.bytes_per_pack == "auto":
        keras3_only["bytes_per_pack"] = (options.bytes_per_pack, "an int")
    for name, (value, off) in keras3_only.items():
        if value != off:
            raise ValueError(
                f"Invalid value for `{name}` with tf_keras (TF_USE_LEGACY_KERAS=1): "
                f"tfdist_opt's gradient path hooks Keras 3 optimizers only. "
                f"Received: {name}={value!r}. Expected {name}={off!r}, or "
                "unset TF_USE_LEGACY_KERAS."
            )
