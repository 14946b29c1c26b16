"""Gradient accumulation that works under tf.distribute: TF binding.

k micro-batches are summed into *local, per-replica* accumulators with no
communication; on every k-th step the accumulated sums are all-reduced once
(compressed and packed, `allreduce.cross_replica_reduce_sum`), divided by k
and applied by the optimizer. Communication per example therefore falls
k-fold, and optimizer state (slots, `iterations`, learning-rate schedules)
advances once per k micro-steps.

Semantics: **mean**. The update uses (sum over k micro-steps of the
all-reduced gradient) / k. Keras divides each replica's loss by the replica
count, so the all-reduced gradient is the mean over the global micro-batch;
the update is then the gradient of the mean loss over micro x k x replicas
examples: one step at batch k x micro (exact for SGD without batch-norm-like
batch statistics). The batch contract is in `contract.py`.

Why not Keras's `gradient_accumulation_steps` (FACTS.md 2,
keras-team/keras#17429, tf-keras#107): it puts `ops.cond(is_update, apply,
accumulate)` in the *replica* context, and its apply branch reaches
`merge_call`, which MirroredStrategy refuses inside a cond branch. Here the
replica-context code has no branch at all:

    replica ctx:  new_i = acc_i + g_i                (local, no comm)
                  wire_i = compress(new_i)
                  applied = merge_call(step, wire)   (unconditional)
                  acc_i.assign(where(applied, 0, new_i))
    cross ctx:    mini_step += 1
                  tf.cond(mini_step % k == 0,
                          all-reduce + extended.update + iterations += 1,
                          no-op)

`batch_reduce_to` and `extended.update` are legal inside a `tf.cond` in the
cross-replica context, and every worker takes the same branch because
`mini_step` is the same everywhere. The cost is a cast of the local sums on
every micro-step when compression is on (no communication).

State (Optax `MultiSteps` style, STYLE.md 10): `AccumulationState` holds
`mini_step` (mirrored int64) and one accumulator per trainable variable
(`synchronization=ON_READ`: each replica keeps its own copy, never synced),
created in one place, `create_state`. They are not Keras-tracked
optimizer variables: a checkpoint taken mid-cycle drops the partial sums and
training resumes at the start of a cycle. A partial cycle left at the end of
`fit` is not applied.

Limits: per-tensor `clipnorm`/`clipvalue` are applied to the mean
accumulated gradient (after the all-reduce, unlike Keras's own path which
clips local gradients); `global_clipnorm`, `use_ema` and
`overwrite_with_gradient` variables raise `NotImplementedError`.
"""

from __future__ import annotations

import dataclasses
import weakref

import tensorflow as tf

from tfdist_opt.gradients import allreduce
from tfdist_opt.gradients.options import GradientOptions

_STATES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


@dataclasses.dataclass
class AccumulationState:
    """Explicit accumulation state for one optimizer.

    Attributes:
        mini_step: tf.Variable (int64). Micro-steps seen; an update happens
            when it reaches a multiple of `k`.
        accumulators: list of tf.Variable. Local sums, one per trainable
            variable in the optimizer's variable order.
        k: int. Micro-steps per update.
    """

    mini_step: tf.Variable
    accumulators: list
    k: int


def create_state(optimizer, variables, k: int) -> AccumulationState:
    """Creates (once) the accumulation state of `optimizer` for `variables`."""
    if optimizer in _STATES:
        return _STATES[optimizer]
    _check_supported(optimizer)
    strategy = optimizer._distribution_strategy
    scope = (strategy.scope() if tf.distribute.get_strategy() is not strategy
             else _null())
    with scope, tf.init_scope():
        mini_step = tf.Variable(
            0, dtype=tf.int64, trainable=False, name="tfdist_mini_step",
            aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        accumulators = []
        for v in variables:
            tv = getattr(v, "value", v)
            accumulators.append(tf.Variable(
                tf.zeros(tv.shape, tv.dtype), trainable=False,
                name="tfdist_accumulator",
                synchronization=tf.VariableSynchronization.ON_READ,
                aggregation=tf.VariableAggregation.SUM))
    state = AccumulationState(mini_step, accumulators, k)
    _STATES[optimizer] = state
    return state


def get_state(optimizer) -> AccumulationState | None:
    """The optimizer's `AccumulationState`, or None before it is built."""
    return _STATES.get(optimizer)


def accumulate_and_apply(optimizer, grads, trainable_variables,
                         options: GradientOptions) -> tf.Tensor:
    """One micro-step: accumulate locally; all-reduce + apply every k-th.

    Must run in a replica context (inside `strategy.run`, as Keras's
    `train_step` does).

    Args:
        optimizer: a built Keras 3 TF optimizer.
        grads: list of local (per-replica, unreduced) gradients.
        trainable_variables: the matching variables.
        options: `GradientOptions` with `grad_accum = k`.

    Returns:
        Scalar bool tensor: whether this micro-step applied an update.
    """
    state = get_state(optimizer)
    if state is None:
        raise RuntimeError(
            "tfdist_opt accumulation: the optimizer has no accumulation state; "
            "build it first (`optimizer.build(model.trainable_variables)`, "
            "which `fit` does) under the strategy's scope.")
    k = state.k
    idx = [optimizer._get_variable_index(v) for v in trainable_variables]
    accs = [state.accumulators[i] for i in idx]
    new = [a.read_value() + tf.cast(tf.convert_to_tensor(g), a.dtype)
           for a, g in zip(accs, grads)]
    strategy = optimizer._distribution_strategy
    n = strategy.num_replicas_in_sync
    wire, metas = allreduce.compress_all(new, options, n)
    tvars = [getattr(v, "value", v) for v in trainable_variables]

    def cross_replica_step(distribution, wire):
        step = state.mini_step.read_value() + 1
        state.mini_step.assign(step)

        def update():
            reduced = allreduce.cross_replica_reduce_sum(
                distribution, wire, tvars, options)
            optimizer._apply_weight_decay(trainable_variables)
            lr = optimizer.learning_rate

            def apply_one(var, r, meta):
                g = allreduce.decompress(r, meta) / tf.cast(k, meta.dtype)
                g = _clip(optimizer, g)
                optimizer.update_step(g, var, lr)

            for r, v, meta in zip(reduced, tvars, metas):
                distribution.extended.update(v, apply_one, args=(r, meta),
                                             group=False)
            optimizer._iterations.assign_add(1)
            return tf.constant(True)

        return tf.cond(tf.equal(step % k, 0), update,
                       lambda: tf.constant(False))

    applied = tf.distribute.get_replica_context().merge_call(
        cross_replica_step, args=(wire,))
    for a, v in zip(accs, new):
        a.assign(tf.where(applied, tf.zeros_like(v), v))
    return applied


def _clip(optimizer, g):
    if optimizer.clipnorm is not None:
        g = tf.clip_by_norm(g, optimizer.clipnorm)
    if optimizer.clipvalue is not None:
        g = tf.clip_by_value(g, -optimizer.clipvalue, optimizer.clipvalue)
    return g


def _check_supported(optimizer) -> None:
    for name in ("global_clipnorm", "use_ema"):
        if getattr(optimizer, name, None):
            raise NotImplementedError(
                f"tfdist_opt grad_accum does not support `{name}` on "
                f"{type(optimizer).__name__}. Received: "
                f"{name}={getattr(optimizer, name)!r}. Expected it unset, or "
                "grad_accum=1.")
    if getattr(optimizer, "gradient_accumulation_steps", None):
        raise ValueError(
            "Invalid optimizer for tfdist_opt grad_accum: Keras's own "
            "`gradient_accumulation_steps` is set too (and fails under "
            "tf.distribute, keras-team/keras#17429). Received: "
            "gradient_accumulation_steps="
            f"{optimizer.gradient_accumulation_steps}. Expected None; use "
            "opt_strategy(grad_accum=k) alone.")


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
