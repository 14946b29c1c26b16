"""Per-optimizer gradient hooks: a cached subclass swapped onto one instance.

`hook(optimizer, binding)` sets `optimizer.__class__` to
`hooked_class(type(optimizer))`, a subclass made once per optimizer class
with `GradientHooks` in front of it (Horovod's DistributedOptimizer wraps
one optimizer the same way, by subclassing its class), and stores the
optimizer's own `OptimizerState`. No Keras class is modified: every other
optimizer in the process, under any strategy, runs upstream Keras code.

The subclass keeps the original's `__name__`, `__qualname__` and
`__module__`, so Keras serialization (`model.save`, `get_config`) writes
the original class and a saved model loads as a plain Keras optimizer (it
is hooked again when loaded in an `opt_strategy().scope()`).

With `shard_optimizer_state=True` the class is
`sharded_state.ShardedStateHooks` in front of that subclass (slot shards,
the sharded update step, full-value saving).

What the overrides do (the upstream methods they rely on are checked by
`upstream.check()`):

The gradient path is the optimizer's chain of gradient stages
(`OptimizerState.chain`, made from the options by `combine.from_options`),
run by `chain_binding`:

* `_all_reduce_sum_gradients`: the chain's step stages (user stages, the
  collective: `AllReduce`, i.e. the collective layer's compressed, packed
  or streamed all-reduce, `collectives.Collectives`, or `PowerSGD`) in
  place of one plain `ReplicaContext.all_reduce`.
* `build`: upstream `build`, then every stage's `init`: the accumulators
  (`Accumulate`), the PowerSGD state (`PowerSGD`, `lowrank.init`), the
  pack-size autotune (`Pack("auto")`, multi-worker), a user stage's state;
  then the optimizer's collective layer.
* `update_step` (`fused_updates`, on by default): Keras's own SGD and
  Adam steps as one fused TF kernel per variable (`fused_updates`).
* `save_own_variables` / `load_own_variables` (Keras's `model.save` /
  `.keras` path): per-replica state (ZeRO slot shards, PowerSGD error
  buffers) saves and loads through `replica_slots`, not `numpy()`.

With `grad_accum > 1` the class is `accumulation.AccumulationHooks` in
front of that subclass:

* `_backend_apply_gradients`: local accumulation and
  one all-reduce + update every k-th micro-step (`accumulation`), instead
  of Keras's `gradient_accumulation_steps` branch, which fails under
  tf.distribute (its `ops.cond` in the replica context reaches
  `merge_call`, which MirroredStrategy refuses inside a cond branch;
  keras-team/keras#17429, tf-keras#107). Upstream `apply` still filters
  empty gradients, unscales, applies constraints and counts every
  micro-step in `_iterations`.
* `iterations` and `_get_current_learning_rate`: the
  optimizer reports, and learning-rate schedules see, updates
  (`_iterations // k`), so Adam's bias correction and schedules advance
  once per k micro-steps, as one big-batch step would.
"""

from __future__ import annotations

from tfdist_opt import _class_swap
from tfdist_opt import runtime

import dataclasses

import tensorflow as tf

from tfdist_opt.gradients.accumulation import accumulation
from tfdist_opt.gradients.stages import chain_binding
from tfdist_opt.gradients.binding import fused_updates
from tfdist_opt.gradients.binding import replica_slots
from tfdist_opt.gradients.zero import sharded_state
from tfdist_opt.gradients.options import GradientOptions


@dataclasses.dataclass
class OptimizerState:
    """What one hooked optimizer does with its gradients.

    Attributes:
        options: `GradientOptions`, fixed when the optimizer was created.
        binding: the `keras_binding.GradientBinding` it was created under
            (holds the autotune results shared by that strategy's models).
        tuned_bytes_per_pack: int or None. The autotuned pack size for this
            optimizer's gradient shapes (set by `build`).
        chain: the `combine.Chain` of gradient stages `options` stand for.
        stage_states: list or None. What each stage's `init` returned, in
            chain order (None before `build`).
        collectives: `collectives.Collectives` or None. The collective
            layer every stage of this optimizer sends through (made by
            `build`, from the chain).
    """

    options: GradientOptions
    binding: object = None
    tuned_bytes_per_pack: int | None = None
    chain: object = None
    stage_states: list | None = None
    collectives: object = None

    def __post_init__(self):
        if self.chain is None:
            self.chain = self.options.chain()

    @property
    def grad_accum(self) -> int:
        return self.options.grad_accum


class GradientHooks:
    """Mixin in front of a Keras 3 TF optimizer class; see the module doc."""

    _tfdist_mixin = True

    def build(self, variables):
        super().build(variables)
        state = state_of(self)
        if state is None:
            return
        chain_binding.init(self, state, self._trainable_variables)

    def _all_reduce_sum_gradients(self, grads_and_vars):
        state = state_of(self)
        if state is None or tf.distribute.get_replica_context() is None:
            return super()._all_reduce_sum_gradients(grads_and_vars)
        return chain_binding.all_reduce(self, state, list(grads_and_vars))

    def update_step(self, gradient, variable, learning_rate):
        state = state_of(self)
        if not (
            state is not None
            and state.options.fused_updates
            and fused_updates.apply_fused(self, gradient, variable, learning_rate)
        ):
            super().update_step(gradient, variable, learning_rate)

    def save_own_variables(self, store):
        if not replica_slots.has_saved_whole(self):
            return super().save_own_variables(store)
        replica_slots.save_variables(self, store)

    def load_own_variables(self, store):
        if not (replica_slots.has_saved_whole(self) and replica_slots.load_variables(self, store)):
            return super().load_own_variables(store)


def hooked_class(cls: type) -> type:
    """The cached `GradientHooks` subclass of optimizer class `cls`."""
    return _class_swap.cached_subclass(GradientHooks, cls)


def hook(optimizer, state: OptimizerState) -> None:
    """Binds `state` to `optimizer` by swapping its class (idempotent)."""
    cls = hooked_class(type(optimizer))
    if state.grad_accum > 1:
        cls = accumulation.accumulating_class(cls)
    if state.options.shard_optimizer_state:
        cls = sharded_state.sharded_class(cls)
    optimizer.__class__ = cls
    runtime.OBJECTS.of(optimizer).gradients = state


def unhook(optimizer) -> None:
    """Gives `optimizer` back its original class (its variables stay)."""
    cls = type(optimizer)
    if issubclass(cls, GradientHooks):
        optimizer.__class__ = next(
            c
            for c in cls.__mro__[1:]
            if not issubclass(
                c,
                (GradientHooks, accumulation.AccumulationHooks, sharded_state.ShardedStateHooks),
            )
        )
    state = runtime.OBJECTS.get(optimizer)
    if state is not None:
        state.gradients = None


def is_hooked(optimizer) -> bool:
    """Whether `optimizer` runs the tfdist_opt gradient hooks."""
    return isinstance(optimizer, GradientHooks) and state_of(optimizer) is not None


def state_of(optimizer) -> OptimizerState | None:
    """The optimizer's `OptimizerState`, or None."""
    state = runtime.OBJECTS.get(optimizer)
    return None if state is None else state.gradients
