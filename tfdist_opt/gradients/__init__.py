"""Gradient path: packing, compression and accumulation as small steps.

Pure modules (no TensorFlow): `options` (`GradientOptions`),
`gradient_plan` (`GradientPlan`: which path runs and why, decided once per
strategy), `packing`
(bucket policy, autotune grid), `precision` (what compression touches and
its error bound), `contract` (the batch contract under accumulation),
`powersgd` (which matrices PowerSGD compresses, bytes per step),
`zero_plan` (sharded optimizer state: shard sizes, refusals, bytes).
TensorFlow bindings, imported on use: `collectives` (the collective
layer: wire dtype, packs or streams, ZeRO's reduce-scatter and gather, in
the replica and the cross-replica context), `accumulation` (local
accumulation, one all-reduce per k), `lowrank` (the PowerSGD stage: state
variables, the replica-context entry, the cross-replica factor step),
`autotune` (measured pack-size search), `timing` (time a collective, agree
across workers), `keras_binding` (binds options to the optimizers created
in a strategy's scope), `fit_length` (grad_accum against a fit's length),
`hooks` (the per-optimizer subclass), `upstream` (the Keras internals they
rely on, checked), `sharded_state` (ZeRO stage 1: slot shards, the shard
update, full-value checkpoints), `replica_slots` (saving optimizer state
that differs per replica: slot shards, PowerSGD residuals).

Stages (pure): `stage` (`GradientStage`, `Bucket`: the interface a user
stage implements), `builtin_stages` (`Accumulate`, `Cast`, `Pack`,
`AllReduce`, `PowerSGD`, `ZeRO`: what the config strings stand for),
`combine` (`chain(*stages)`: composition and the combination rules); their
TensorFlow binding is `chain_binding` (`StageContext`); each built-in
stage's `init` and `reduce` hold its own code.
"""

from tfdist_opt.gradients.builtin_stages import Accumulate
from tfdist_opt.gradients.builtin_stages import AllReduce
from tfdist_opt.gradients.builtin_stages import Cast
from tfdist_opt.gradients.builtin_stages import Pack
from tfdist_opt.gradients.builtin_stages import PowerSGD
from tfdist_opt.gradients.builtin_stages import ZeRO
from tfdist_opt.gradients.combine import Chain
from tfdist_opt.gradients.combine import chain
from tfdist_opt.gradients.contract import check_batch_contract
from tfdist_opt.gradients.contract import effective_batch_size
from tfdist_opt.gradients.options import GradientOptions
from tfdist_opt.gradients.packing import PackPolicy
from tfdist_opt.gradients.packing import assign_buckets
from tfdist_opt.gradients.packing import auto_pack_policy
from tfdist_opt.gradients.precision import compression_rtol
from tfdist_opt.gradients.stage import Bucket
from tfdist_opt.gradients.stage import GradientStage

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
