"""Gradient path: every step from a Keras optimizer's gradients to the wire.

Top level, pure: `options` (`GradientOptions`: what the path does, decided
once per strategy) and `gradient_plan` (`GradientPlan`: which path runs,
with which stages, and why). Sub-packages, one feature each, each a pure
plan beside its TensorFlow code:

- `stages`: the `GradientStage` interface, the built-in stages and `chain`;
- `collectives`: the collective layer, packing, pieces, precision;
- `powersgd`: low-rank compression;
- `zero`: sharded optimizer state, and what fits in memory;
- `accumulation`: k micro-batches per optimizer step;
- `autotune`: measured pack sizes and `compression="auto"`;
- `binding`: the path bound to Keras 3 optimizers (hooks, fused updates,
  per-replica optimizer state, the Keras internals relied on).
"""

from tfdist_opt.gradients.accumulation.contract import check_batch_contract
from tfdist_opt.gradients.accumulation.contract import effective_batch_size
from tfdist_opt.gradients.collectives.packing import PackPolicy
from tfdist_opt.gradients.collectives.packing import assign_buckets
from tfdist_opt.gradients.collectives.packing import auto_pack_policy
from tfdist_opt.gradients.collectives.precision import compression_rtol
from tfdist_opt.gradients.options import GradientOptions
from tfdist_opt.gradients.stages.builtin_stages import Accumulate
from tfdist_opt.gradients.stages.builtin_stages import AllReduce
from tfdist_opt.gradients.stages.builtin_stages import Cast
from tfdist_opt.gradients.stages.builtin_stages import Pack
from tfdist_opt.gradients.stages.builtin_stages import PowerSGD
from tfdist_opt.gradients.stages.builtin_stages import ZeRO
from tfdist_opt.gradients.stages.combine import Chain
from tfdist_opt.gradients.stages.combine import chain
from tfdist_opt.gradients.stages.stage import Bucket
from tfdist_opt.gradients.stages.stage import GradientStage

__all__ = [
    "Accumulate",
    "AllReduce",
    "Bucket",
    "Cast",
    "Chain",
    "GradientOptions",
    "GradientStage",
    "Pack",
    "PackPolicy",
    "PowerSGD",
    "ZeRO",
    "assign_buckets",
    "auto_pack_policy",
    "chain",
    "check_batch_contract",
    "compression_rtol",
    "effective_batch_size",
]
