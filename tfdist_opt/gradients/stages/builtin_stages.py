"""The built-in gradient stages: what the `StrategyConfig` strings stand for.

Each class holds its settings, its position, its combination rules
(`conflicts`) and its own `init` and `reduce`. Importing this module
imports no TensorFlow (configuration checking stays free of it): a stage
whose code is TensorFlow imports its module when the optimizer first runs
it (`Accumulate`: `accumulation`, `PowerSGD`: `lowrank`); the collective
ones call the optimizer's collective layer (`context.collectives`, made
from the chain's `Cast` and `Pack`).

| stage | position | the string it stands for |
|---|---|---|
| `Accumulate(k)` | accumulate | `grad_accum=k` |
| `Cast("bf16" / "fp16")` | wire | `compression="bf16"` / `"fp16"`, `powersgd_wire` |
| `Pack(bytes)` | pack | `bytes_per_pack` |
| `AllReduce()` | collective | the default collective |
| `PowerSGD(rank, ...)` | collective | `compression="powersgd"`, `powersgd_*` |
| `ZeRO(bucket_bytes)` | update | `shard_optimizer_state=True`, `shard_bucket_bytes` |

`source` (keyword-only on every class) is the setting a stage was made
from, e.g. `"grad_accum=4"`: error messages name it.
"""

from __future__ import annotations

from tfdist_opt import validation
from tfdist_opt.gradients.powersgd import powersgd
from tfdist_opt.gradients.stages.stage import GradientStage

WIRES = ("fp16", "bf16")
# ZeRO's bucket bound: the `shard_bucket_bytes` default everywhere.
ZERO_BUCKET_BYTES = 8 << 20


class BuiltinStage(GradientStage):
    """A stage tfdist_opt implements (equal when its settings are)."""

    def __init__(self, *, source: str | None = None):
        self.source = source

    def option_fields(self) -> dict:
        """The `GradientOptions` fields this stage stands for."""
        return {}

    def __eq__(self, other):
        return type(other) is type(self) and other.option_fields() == self.option_fields()

    def __hash__(self):
        return hash((type(self).__name__, tuple(sorted(self.option_fields().items()))))


class Accumulate(BuiltinStage):
    """Sums `steps` micro-batches' gradients locally; one update per `steps`.

    Every `steps`-th micro-step it runs the chain's wire, pack and
    collective stages once, on the accumulated sum, from the cross-replica
    context inside a `tf.cond` (`tfdist_opt.gradients.accumulation.accumulation`), so
    it cannot run a user stage, whose `reduce` runs in the replica context.
    """

    position = "accumulate"

    def __init__(self, steps: int, *, source: str | None = None):
        super().__init__(source=source)
        validation.check_int("steps", steps, minimum=1)
        self.steps = steps

    def init(self, variables, context):
        from tfdist_opt.gradients.accumulation import accumulation

        return accumulation.create_accumulators(context.optimizer, variables)

    def option_fields(self) -> dict:
        return {"grad_accum": self.steps}

    def conflicts(self, other):
        if not isinstance(other, BuiltinStage):
            return (
                "the accumulated step all-reduces from the cross-replica context "
                f"inside a tf.cond, where {other.name}.reduce (replica context, "
                "every micro-step) cannot run; accumulate in the input pipeline "
                "(a bigger batch) or leave grad_accum at 1"
            )
        return None


class Cast(BuiltinStage):
    """Every collective of the step travels in `dtype` (`"fp16"`, `"bf16"`).

    fp16 values are divided by the replica count before the cast and
    multiplied back after the sum (`predivide`), so a sum cannot overflow.
    """

    position = "wire"
    lossy = True

    def __init__(self, dtype: str, *, source: str | None = None):
        super().__init__(source=source)
        validation.check_choice("dtype", dtype, WIRES)
        self.dtype = dtype

    def option_fields(self) -> dict:
        return {"compression": self.dtype}


class Pack(BuiltinStage):
    """Groups the tensors of each collective into packs of `bytes_per_pack`.

    `0`: one pack per dtype; `"auto"`: DDP-style buckets, refined by a
    measured autotune on multi-worker strategies (`init`).
    """

    position = "pack"

    def __init__(self, bytes_per_pack: int | str, *, source: str | None = None):
        super().__init__(source=source)
        if bytes_per_pack != "auto":
            validation.check_int(
                "bytes_per_pack",
                bytes_per_pack,
                minimum=0,
                expected='a non-negative int or "auto"',
            )
        self.bytes_per_pack = bytes_per_pack

    def init(self, variables, context):
        if self.bytes_per_pack == "auto":
            return context.autotune_pack_size(variables)
        return None

    def option_fields(self) -> dict:
        return {"bytes_per_pack": self.bytes_per_pack}


class AllReduce(BuiltinStage):
    """The plain collective: the collective layer's SUM of every gradient."""

    position = "collective"

    def reduce(self, bucket, state, context):
        return bucket.replace(context.collectives.all_reduce_sum(bucket.gradients))


class PowerSGD(BuiltinStage):
    """Low-rank PowerSGD with error feedback (Vogels et al., 2019).

    Replaces the all-reduce of the matrices it selects by two factor
    all-reduces; the other gradients ride in the first one. State: one
    error buffer per replica and one Q factor per compressed matrix
    (`tfdist_opt.gradients.powersgd.lowrank`).

    References:
        Vogels, Karimireddy, Jaggi. PowerSGD: Practical Low-Rank Gradient
        Compression for Distributed Optimization. NeurIPS 2019.
    """

    position = "collective"
    lossy = True

    def __init__(
        self,
        rank: int = powersgd.DEFAULT_RANK,
        start_step: int = powersgd.DEFAULT_START_STEP,
        min_compression: float = powersgd.DEFAULT_MIN_COMPRESSION,
        seed: int = 0,
        *,
        source: str | None = None,
    ):
        super().__init__(source=source)
        powersgd.check_settings(rank, start_step, min_compression, "none")
        validation.check_int("seed", seed, minimum=0)
        self.rank, self.start_step = rank, start_step
        self.min_compression, self.seed = min_compression, seed

    def init(self, variables, context):
        from tfdist_opt.gradients.powersgd import lowrank

        cast = context.chain.first(Cast)
        return lowrank.init(context.optimizer, variables, self, cast.dtype if cast else "none")

    def reduce(self, bucket, state, context):
        from tfdist_opt.gradients.powersgd import lowrank

        return bucket.replace(lowrank.reduce(context.optimizer, bucket, state, context.collectives))

    def option_fields(self) -> dict:
        return {
            "compression": "powersgd",
            "powersgd_rank": self.rank,
            "powersgd_start_step": self.start_step,
            "powersgd_min_compression": self.min_compression,
            "powersgd_seed": self.seed,
        }


class ZeRO(BuiltinStage):
    """ZeRO stage 1: each replica keeps and updates 1/n of every slot.

    Reduce-scatters the gradients and gathers the updated shards in
    buckets of at most `bucket_bytes` (`tfdist_opt.gradients.zero.sharded_state`).
    A user `"local"` stage runs before the reduce-scatter, on each
    replica's own gradients; a user `"collective"` or `"after"` stage is
    refused: the sharded update does its own collective and no replica
    ever holds the whole sums.
    """

    position = "update"

    def __init__(self, bucket_bytes: int = ZERO_BUCKET_BYTES, *, source: str | None = None):
        super().__init__(source=source)
        validation.check_int("bucket_bytes", bucket_bytes, minimum=0)
        self.bucket_bytes = bucket_bytes

    def option_fields(self) -> dict:
        return {"shard_optimizer_state": True, "shard_bucket_bytes": self.bucket_bytes}

    def conflicts(self, other):
        if isinstance(other, PowerSGD):
            return (
                "PowerSGD's error feedback and low-rank update need the whole "
                "gradient matrix on every replica, which sharding is meant to avoid"
            )
        if isinstance(other, Accumulate):
            return (
                "not implemented (the accumulated update runs in the "
                "cross-replica context, the sharded update needs the replica context)"
            )
        if not isinstance(other, BuiltinStage) and other.position in ("collective", "after"):
            return (
                "the sharded update reduce-scatters the gradients itself, so "
                "each replica receives only its shard of the summed gradients, "
                f"never the whole sums a {other.position!r} stage maps; a "
                "'local' stage runs with it"
            )
        return None
