"""Gradient accumulation that works under tf.distribute: TF binding.

k micro-batches are summed into *local, per-replica* accumulators with no
communication; on every k-th micro-step the accumulated sums are
all-reduced once (compressed and packed: the collective layer's
cross-replica all-reduce, `collectives.CrossReplicaCollectives`),
divided by k and applied by the optimizer. Communication per example
therefore falls k-fold, and optimizer state (slots, `iterations`,
learning-rate schedules) advances once per k micro-steps.

Semantics: **mean**. The update uses (sum over k micro-steps of the
all-reduced gradient) / k. Keras divides each replica's loss by the replica
count, so the all-reduced gradient is the mean over the global micro-batch;
the update is then the gradient of the mean loss over micro x k x replicas
examples: one step at batch k x micro (exact for SGD without batch-norm-like
batch statistics). The batch contract is in `contract.py`.

Why not Keras's `gradient_accumulation_steps` (keras-team/keras#17429,
tf-keras#107): it puts `ops.cond(is_update, apply, accumulate)` in the
*replica* context, and its apply branch reaches `merge_call`, which
MirroredStrategy refuses inside a cond branch ("merge_call called while
defining a new graph or a tf.function"). Here the replica-context code has
no branch at all:

    replica ctx:  new_i = acc_i + g_i                (local, no comm)
                  applied = merge_call(step, new)    (unconditional)
                  acc_i.assign(where(applied, 0, new_i))
    cross ctx:    tf.cond((_iterations + 1) % k == 0,
                          cast + all-reduce + extended.update, no-op)

`batch_reduce_to` and `extended.update` are legal inside a `tf.cond` in the
cross-replica context, and every worker takes the same branch because the
micro-step counter is the same everywhere.

State: the micro-step counter is the optimizer's own `_iterations` (upstream
`apply` adds 1 per call; the hooked `iterations` reports `_iterations // k`),
and the accumulators are optimizer variables (`add_variable_from_reference`,
so `optimizer.variables`, `tf.train.Checkpoint(optimizer=...)` and
`model.save` hold them) created `synchronization=ON_READ, aggregation=SUM`:
each replica updates its own copy with no communication. A checkpoint
holds every replica's accumulator (`replica_slots.PerReplicaSum`: stacked,
one slice per replica), restored replica for replica at the same replica
count (so a compressed wire, which rounds each replica's value, sends what
it would have: `StrategyConfig.replicas` keeps the count across a resize);
at another count (or from a checkpoint holding their sum) every replica
gets sum / n, so the sum that the next update all-reduces is what it was:
a checkpoint taken mid-cycle resumes mid-cycle (equal up to float32
summation order). A
partial cycle left at the end of `fit` stays in the accumulators.

Limits: per-tensor `clipnorm`/`clipvalue` are applied to the mean
accumulated gradient (after the all-reduce, unlike Keras's own path which
clips local gradients); `global_clipnorm` and `use_ema` raise
`NotImplementedError`. Variables with `overwrite_with_gradient=True` are
handled by upstream `apply` on every micro-step, as without accumulation.
"""

from __future__ import annotations

import tensorflow as tf

from tfdist_opt import _class_swap
from tfdist_opt import runtime
from tfdist_opt.gradients.collectives import collectives as collectives_lib
from tfdist_opt.gradients.powersgd import lowrank
from tfdist_opt.gradients.binding import replica_slots

ACCUMULATOR_NAME = "tfdist_accumulator"


class AccumulationHooks:
    """Mixin in front of a hooked optimizer class when `grad_accum > 1`.

    `hooks.hook` swaps it onto the instance (as `sharded_state` does ZeRO's):
    the apply step accumulates and updates every k-th micro-step, and the
    optimizer reports, and learning-rate schedules see, updates
    (`_iterations // k`), so Adam's bias correction and schedules advance
    once per k micro-steps, as one big-batch step would.
    """

    def _backend_apply_gradients(self, grads, trainable_variables):
        state = runtime.OBJECTS.of(self).gradients
        accumulate_and_apply(self, list(grads), list(trainable_variables), state)

    @property
    def iterations(self):
        k = runtime.OBJECTS.of(self).gradients.grad_accum
        return tf.math.floordiv(self._iterations.value, k)

    def _get_current_learning_rate(self):
        import keras

        schedule = getattr(self, "_learning_rate", None)
        if isinstance(schedule, keras.optimizers.schedules.LearningRateSchedule):
            return schedule(self.iterations)
        return super()._get_current_learning_rate()


def accumulating_class(cls: type) -> type:
    """The cached `AccumulationHooks` subclass of (hooked) class `cls`."""
    return _class_swap.cached_subclass(AccumulationHooks, cls)


def create_accumulators(optimizer, variables) -> list:
    """Creates (once) one ON_READ SUM accumulator per variable, tracked.

    Args:
        optimizer: a Keras 3 TF optimizer (being built).
        variables: its trainable variables, in its variable order.

    Returns:
        The list of accumulators (Keras variables), also in
        `optimizer.variables`.
    """
    existing = accumulators_of(optimizer)
    if existing is not None:
        return existing
    check_supported(optimizer)
    strategy = optimizer._distribution_strategy
    with replica_slots.creation_scope(strategy):
        accumulators = [
            replica_slots.add_slot(
                optimizer,
                v,
                ACCUMULATOR_NAME,
                v.shape,
                "zeros",
                replica_slots.on_read_sum,
                replica_slots.PerReplicaSum,
                _tfdist_strategy=strategy,
            )
            for v in variables
        ]
    runtime.OBJECTS.of(optimizer).accumulators = accumulators
    return accumulators


def accumulators_of(optimizer) -> list | None:
    """The optimizer's accumulators, or None before it is built."""
    state = runtime.OBJECTS.get(optimizer)
    return None if state is None else state.accumulators


def accumulate_and_apply(optimizer, grads, trainable_variables, state) -> tf.Tensor:
    """One micro-step: accumulate locally; all-reduce + apply every k-th.

    Must run in a replica context (inside `strategy.run`, as Keras's
    `train_step` does); the caller (upstream `apply`) counts the micro-step
    in `_iterations` afterwards.

    Args:
        optimizer: a built Keras 3 TF optimizer.
        grads: list of local (per-replica, unreduced) gradients.
        trainable_variables: the matching variables.
        state: the optimizer's `hooks.OptimizerState` (`grad_accum = k`).

    Returns:
        Scalar bool tensor: whether this micro-step applied an update.
    """
    accumulators = accumulators_of(optimizer)
    if accumulators is None:
        raise RuntimeError(
            "tfdist_opt accumulation: the optimizer has no accumulators; "
            "build it first (`optimizer.build(model.trainable_variables)`, "
            "which `fit` does) under the strategy's scope."
        )
    k = state.grad_accum
    accs = [accumulators[optimizer._get_variable_index(v)].value for v in trainable_variables]
    new = [a.read_value() + tf.cast(tf.convert_to_tensor(g), a.dtype) for a, g in zip(accs, grads)]
    # PowerSGD (compression="powersgd") takes its matrices, once per
    # update; the rest rides in its P factors' collective. Otherwise every
    # sum takes the collective layer's packed all-reduce.
    psgd = lowrank.state_of(optimizer) if state.options.is_powersgd else None
    index = [optimizer._get_variable_index(v) for v in trainable_variables]
    low = [i for i, x in enumerate(index) if psgd and x in psgd.entries]
    rest = [i for i in range(len(new)) if i not in set(low)]
    tvars = [getattr(v, "value", v) for v in trainable_variables]
    micro_steps = optimizer._iterations

    def cross_replica_step(distribution, raw, raw_rest):
        step = tf.convert_to_tensor(micro_steps) + 1

        def update():
            cross = state.collectives.cross_replica(distribution)
            if psgd:
                summed = lowrank.apply(
                    cross,
                    list(raw),
                    [psgd.entries[index[i]] for i in low],
                    step // k - 1,
                    psgd.start_step,
                    rest=list(raw_rest),
                )
            else:
                summed = [
                    collectives_lib.per_replica(distribution, per_dev)
                    for per_dev in cross.all_reduce_sum(
                        [collectives_lib.local_results(distribution, r) for r in raw_rest]
                    )
                ]
            reduced = [None] * len(tvars)
            for i, r in zip(low + rest, summed):
                reduced[i] = r
            optimizer._apply_weight_decay(trainable_variables)
            lr = optimizer.learning_rate

            def apply_one(var, g):
                g = g / tf.cast(k, g.dtype)
                optimizer.update_step(_clip(optimizer, g), var, lr)

            for r, v in zip(reduced, tvars):
                distribution.extended.update(v, apply_one, args=(r,), group=False)
            return tf.constant(True)

        return tf.cond(tf.equal(step % k, 0), update, lambda: tf.constant(False))

    applied = tf.distribute.get_replica_context().merge_call(
        cross_replica_step, args=(tuple(new[i] for i in low), tuple(new[i] for i in rest))
    )
    for a, v in zip(accs, new):
        a.assign(tf.where(applied, tf.zeros_like(v), v))
    return applied


def check_supported(optimizer) -> None:
    """Raises for optimizer settings accumulation does not implement."""
    for name in ("global_clipnorm", "use_ema"):
        if getattr(optimizer, name, None):
            raise NotImplementedError(
                f"tfdist_opt grad_accum does not support `{name}` on "
                f"{type(optimizer).__name__}. Received: "
                f"{name}={getattr(optimizer, name)!r}. Expected it unset, or "
                "grad_accum=1."
            )
    if getattr(optimizer, "gradient_accumulation_steps", None):
        raise ValueError(
            "Invalid optimizer for tfdist_opt grad_accum: Keras's own "
            "`gradient_accumulation_steps` is set too (and fails under "
            "tf.distribute, keras-team/keras#17429). Received: "
            "gradient_accumulation_steps="
            f"{optimizer.gradient_accumulation_steps}. Expected None; use "
            "opt_strategy(grad_accum=k) alone."
        )


def _clip(optimizer, g):
    if optimizer.clipnorm is not None:
        g = tf.clip_by_norm(g, optimizer.clipnorm)
    if optimizer.clipvalue is not None:
        g = tf.clip_by_value(g, -optimizer.clipvalue, optimizer.clipvalue)
    return g
