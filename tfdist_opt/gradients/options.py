"""`GradientOptions`: what the gradient path does, decided once per strategy.

Pure Python (no TensorFlow import). `tfdist_opt.strategy` builds one from a
`StrategyConfig` and attaches it to the strategy; the Keras binding
(`tfdist_opt.gradients.binding.keras_binding`) gives it to each Keras optimizer
created in that strategy's scope, which keeps it for its lifetime.

The gradient path, in order, for every optimizer step (one *micro*-step when
`grad_accum > 1`):

    local grads -> [accumulate locally, k-1 of k steps stop here]
                -> compress (cast to fp16/bf16, fp16 pre-divided by n)
                -> pack into buckets -> all-reduce SUM (one collective per bucket)
                -> decompress (cast back, x n) -> / k (mean) -> optimizer update

With `compression="powersgd"` the matrices chosen by `powersgd.plan` take
the low-rank stage (`lowrank`: error feedback, P all-reduce, QR, Q
all-reduce) in place of the cast, from update `powersgd_start_step` on;
the rest of the step's gradients take the path above (cast to
`powersgd_wire`), in the same step.

That path is a chain of gradient stages (`combine`): `chain()` is the chain
these strings stand for, with the user's `stages` placed by position. Which
path runs, and why, is the strategy's `gradient_plan.GradientPlan`. The
field defaults here are the defaults of `StrategyConfig`'s gradient fields.
"""

from __future__ import annotations

import dataclasses

from tfdist_opt import validation
from tfdist_opt.gradients.stages import builtin_stages
from tfdist_opt.gradients.stages import combine
from tfdist_opt.gradients import gradient_plan
from tfdist_opt.gradients.powersgd import powersgd
from tfdist_opt.gradients.stages.builtin_stages import BuiltinStage
from tfdist_opt.gradients.stages.stage import GradientStage

# "auto": runs as "none" until `auto_fit` replaces it by its choice.
COMPRESSIONS = ("none", "fp16", "bf16", "powersgd", "auto")
# Bytes per element of the wire dtype, and of the dtypes we never compress.
WIRE_DTYPES = {"fp16": "float16", "bf16": "bfloat16"}
# collective_piece_bytes' default.
PIECE_BYTES = 2 << 20


@dataclasses.dataclass(frozen=True)
class GradientOptions:
    """How gradients are packed, compressed and accumulated.

    Args:
        bytes_per_pack: int or `"auto"`. Bucket size in bytes for the
            all-reduce (0: one bucket holding every gradient, TF's default);
            `"auto"`: DDP-style buckets chosen from the gradient sizes by
            `tfdist_opt.gradients.collectives.packing.auto_pack_policy`, refined by a
            measured autotune on multi-worker strategies. Defaults to `0`.
        compression: str. `"none"`, `"fp16"` or `"bf16"`: the wire dtype of
            float gradients; `"powersgd"`: low-rank factors; `"auto"`: as
            `"none"` until `tfdist_opt.gradients.autotune.auto_fit` picks one of
            the others in the first steps of `fit`. Defaults to `"none"`.
        grad_accum: int. Micro-batches accumulated locally before each
            all-reduce and optimizer step (mean semantics). Defaults to `1`.
        predivide: bool. Divide by the replica count before an fp16 cast
            and multiply back after the sum, so the sum of n values can
            never exceed the largest local value (no overflow). Only used
            for `"fp16"`. Defaults to `True`.
        autotune: bool. With `bytes_per_pack="auto"` on a multi-worker
            strategy, time candidate bucket sizes on the real gradient
            shapes when the optimizer is built and keep the fastest.
            Defaults to `True`.
        autotune_csv: str or None. Where the chief writes every autotune
            trial (CSV). Defaults to `None` (trials are logged only).
        via_hook: bool. Route an int `bytes_per_pack` through tfdist_opt's
            packing hook instead of leaving it to TF's
            `CommunicationOptions`, which are bound when the strategy is
            created (for a strategy that must keep TF's defaults, e.g. a
            benchmark's baseline in the same process). Defaults to `False`.
        hooked: bool. Run Keras 3 optimizers through tfdist_opt's gradient
            hooks even where TF's own all-reduce would do the same work
            (one pack, float32, every step), so that `fused_updates` and
            `collective_streams` apply: one fused update per step instead
            of TF's unfused one. The plan of a multi-worker
            strategy sets it (`gradient_plan.plan_gradients`). Defaults to
            `False`.
        powersgd_rank: int. `compression="powersgd"`: rank R of the
            factors (each matrix uses min(R, rows, cols)). Defaults to `4`.
        powersgd_start_step: int. Updates run uncompressed before PowerSGD
            starts. Defaults to `100`.
        powersgd_min_compression: float. Compress a matrix only when its
            factors are at least this many times smaller (0: every matrix).
            Defaults to `2.0`.
        powersgd_wire: str. `"none"`, `"bf16"` or `"fp16"`: the dtype the
            factors and the uncompressed rest travel in. Defaults to
            `"none"` (float32).
        powersgd_seed: int. Seed of the first Q, shared by every replica.
            Defaults to `0`.
        shard_optimizer_state: bool. ZeRO stage 1: each replica keeps 1/n
            of every optimizer slot (`sharded_state`). Defaults to `False`.
        shard_bucket_bytes: int. Bound on one bucket of the sharded step
            (reduce-scatter and gather, `zero_plan`); 0: one per dtype.
            Defaults to `8 MiB`.
        fused_updates: bool. Keras's own SGD and Adam update steps run as
            one fused TF kernel per variable (`fused_updates`) in the
            optimizers this path hooks. Defaults to `True`.
        collective_streams: int. With n > 0, a replica-context all-reduce
            of dense gradients (`collectives.Collectives.all_reduce_sum`) runs as pieces of
            `collective_piece_bytes`, backprop order, up to n collectives
            in flight (`tfdist_opt.gradients.collectives.collectives`); 0: TF's launcher,
            one collective per pack. Defaults to `0`.
        collective_piece_bytes: int. Bytes per piece with
            `collective_streams`. Defaults to `2 MiB`.
        stages: tuple of `GradientStage`. Stages added to the chain the
            fields above make (`tfdist_opt.gradients.stages.combine`), placed by
            their `position`; a built-in stage here sets its fields (e.g.
            `Cast("bf16")`: `compression="bf16"`). Defaults to `()`.

    Raises:
        TypeError: `stages` is not a list or tuple of `GradientStage`.
        ValueError: a value outside the ranges above, or stages that do not
            combine (`combine.chain`'s rules).
    """

    bytes_per_pack: int | str = 0
    compression: str = "none"
    grad_accum: int = 1
    predivide: bool = True
    autotune: bool = True
    autotune_csv: str | None = None
    via_hook: bool = False
    hooked: bool = False
    powersgd_rank: int = powersgd.DEFAULT_RANK
    powersgd_start_step: int = powersgd.DEFAULT_START_STEP
    powersgd_min_compression: float = powersgd.DEFAULT_MIN_COMPRESSION
    powersgd_wire: str = "none"
    powersgd_seed: int = 0
    shard_optimizer_state: bool = False
    shard_bucket_bytes: int = builtin_stages.ZERO_BUCKET_BYTES
    fused_updates: bool = True
    collective_streams: int = 0
    collective_piece_bytes: int = PIECE_BYTES
    stages: tuple = ()

    def __post_init__(self):
        bpp = self.bytes_per_pack
        if bpp != "auto" and (isinstance(bpp, bool) or not isinstance(bpp, int) or bpp < 0):
            raise ValueError(
                "Invalid value for `bytes_per_pack`: expected a non-negative "
                f'int or "auto". Received: bytes_per_pack={bpp!r}'
            )
        validation.check_int("collective_streams", self.collective_streams, minimum=0)
        validation.check_int("collective_piece_bytes", self.collective_piece_bytes, minimum=1)
        if self.compression not in COMPRESSIONS:
            raise ValueError(
                "Invalid value for `compression`: expected one of "
                f"{', '.join(repr(c) for c in COMPRESSIONS)}. "
                f"Received: compression={self.compression!r}"
            )
        k = self.grad_accum
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(
                "Invalid value for `grad_accum`: expected a positive int. "
                f"Received: grad_accum={k!r}"
            )
        powersgd.check_settings(
            self.powersgd_rank,
            self.powersgd_start_step,
            self.powersgd_min_compression,
            self.powersgd_wire,
        )
        stages = self.stages
        if isinstance(stages, GradientStage) or not isinstance(stages, (list, tuple)):
            raise TypeError(
                "Invalid value for `stages`: expected a list or tuple of "
                f"GradientStage instances. Received: stages={stages!r}"
            )
        object.__setattr__(self, "stages", tuple(stages))
        pipeline = combine.from_options(self)  # raises on a bad combination
        if any(isinstance(s, BuiltinStage) for s in self.stages):
            # Built-in stages passed as objects set the fields they stand for.
            same = pipeline.options(dataclasses.replace(self, stages=()))
            for field in dataclasses.fields(self):
                object.__setattr__(self, field.name, getattr(same, field.name))

    @property
    def wire_dtype(self) -> str | None:
        """Name of the dtype float gradients travel in, or None."""
        if self.is_powersgd:
            return WIRE_DTYPES.get(self.powersgd_wire)
        return WIRE_DTYPES.get(self.compression)

    @property
    def is_powersgd(self) -> bool:
        return self.compression == "powersgd"

    @property
    def is_default(self) -> bool:
        """True when TF's own all-reduce path already does everything.

        The plan's answer (`gradient_plan.hook_causes`): nothing here needs
        tfdist_opt's hooks.
        """
        return not gradient_plan.hook_causes(self)

    def chain(self) -> combine.Chain:
        """The chain of gradient stages these options run (`combine`)."""
        return combine.from_options(self)

    @classmethod
    def from_config(cls, config, stages=()) -> "GradientOptions":
        """From a `tfdist_opt.StrategyConfig` (duck-typed: no import).

        The strategy's plan resolves the rest (`gradient_plan.plan_gradients`).

        `stages`: the user's gradient stages (`opt_strategy(gradient_stages=...)`).
        """
        return cls(
            stages=tuple(stages),
            bytes_per_pack=config.bytes_per_pack,
            compression=config.compression,
            grad_accum=config.grad_accum,
            powersgd_rank=config.powersgd_rank,
            powersgd_start_step=config.powersgd_start_step,
            powersgd_min_compression=config.powersgd_min_compression,
            powersgd_wire=config.powersgd_wire,
            shard_optimizer_state=config.shard_optimizer_state,
            shard_bucket_bytes=config.shard_bucket_bytes,
            fused_updates=config.fused_updates,
            collective_piece_bytes=config.collective_piece_bytes,
        )
