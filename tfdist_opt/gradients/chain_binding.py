"""Runs a `Chain` of gradient stages in a hooked optimizer: TF binding.

`init(optimizer, state, variables)` (the hooked `build`) calls every
stage's `init` once, in chain order, and keeps what they return in the
optimizer's `hooks.OptimizerState`. `all_reduce(optimizer, state,
grads_and_vars)` (the hooked `_all_reduce_sum_gradients`, replica context)
reduces the sparse gradients (`tf.IndexedSlices`) with TF's own
all-reduce, then hands the step's dense gradients, one `Bucket` at a time
(one per pack when the chain holds a user stage, else one for the step),
through the stages at positions `"local"` to `"after"`, in order; the
collective stage returns the sums. `"accumulate"` and `"update"` stages act in the
optimizer's apply step instead (`accumulation`, `sharded_state`); the
sharded update runs the `"local"` stages first (`run_local`).

`StageContext` is what a stage's `init` and `reduce` get; the built-in
stages' TensorFlow code is here (`builtin_init`, `builtin_reduce`), each
the function the gradient path ran before stages existed.
"""

from __future__ import annotations

import tensorflow as tf

from tfdist_opt.gradients import accumulation
from tfdist_opt.gradients import allreduce
from tfdist_opt.gradients import builtin_stages as bs
from tfdist_opt.gradients import lowrank
from tfdist_opt.gradients import replica_slots
from tfdist_opt.gradients import streams
from tfdist_opt.gradients.stage import Bucket

_STEP_POSITIONS = ("local", "wire", "pack", "collective", "after")


class StageContext:
    """What a stage's `init` and `reduce` are given.

    Attributes:
        optimizer: the Keras 3 optimizer the chain runs in.
        strategy: its `tf.distribute.Strategy`.
        num_replicas: int. Replicas summed by a collective.
        options: the `GradientOptions` the chain stands for (built-ins).
    """

    def __init__(self, optimizer, state):
        self.optimizer = optimizer
        self.strategy = optimizer._distribution_strategy
        self.num_replicas = self.strategy.num_replicas_in_sync
        self.options = state.options
        self._state = state

    @property
    def step(self) -> tf.Tensor:
        """The optimizer's update count before this step (int tensor)."""
        return self.optimizer.iterations

    def add_state(self, variable, name: str, per_replica: bool = True, initializer="zeros"):
        """Creates one state variable shaped like `variable` (in `init`).

        Args:
            variable: the model variable it belongs to (shape, dtype, place).
            name: str. Suffix of the state variable's name.
            per_replica: bool. True: each replica keeps its own value
                (`ON_READ`; read and `assign` it in `reduce` for this
                replica); checkpoints hold every replica's value and give
                each its own back (`replica_slots.PerReplicaSum`). False:
                one value, the same on every replica (mirrored). Defaults
                to `True`.
            initializer: a Keras initializer or its name. Defaults to
                `"zeros"`.

        Returns:
            A Keras variable tracked by the optimizer, so every checkpoint,
            `model.save` and backup carries it.
        """
        opt, strategy = self.optimizer, self.strategy
        with replica_slots.creation_scope(strategy):
            if not per_replica:
                return opt.add_variable_from_reference(variable, name, initializer)
            return replica_slots.add_slot(
                opt,
                variable,
                name,
                variable.shape,
                initializer,
                replica_slots.on_read_sum,
                replica_slots.PerReplicaSum,
                _tfdist_strategy=strategy,
            )

    def all_reduce_sum(self, tensors) -> list:
        """SUM over replicas of `tensors` (replica context), as a list.

        The chain's wire stage (`Cast`) decides the dtype they travel in
        and its pack stage (`Pack`) how they are grouped into collectives.
        """
        return allreduce.all_reduce_sum(
            list(tensors),
            self.options,
            self.strategy,
            tuned=self._state.tuned_bytes_per_pack,
            streams=self._state.streams,
        )

    def builtin_init(self, stage, variables):
        """A built-in stage's `init`: the state it has always made."""
        if isinstance(stage, bs.Accumulate):
            return accumulation.create_accumulators(self.optimizer, variables)
        if isinstance(stage, bs.PowerSGD):
            return lowrank.init(self.optimizer, variables, self.options)
        if isinstance(stage, bs.Pack) and stage.bytes_per_pack == "auto" and self.options.autotune:
            tune = getattr(self._state.binding, "tuned_pack_size", None)
            if tune is not None:
                self._state.tuned_bytes_per_pack = tune(variables)
        return None

    def builtin_reduce(self, stage, bucket: Bucket, state) -> Bucket:
        """A built-in stage's `reduce` (Cast and Pack act in the collective)."""
        if isinstance(stage, bs.AllReduce):
            return bucket.replace(self.all_reduce_sum(bucket.gradients))
        if isinstance(stage, bs.PowerSGD):
            pairs = lowrank.all_reduce_sum(
                self.optimizer,
                list(zip(bucket.gradients, bucket.variables)),
                state,
                tuned=self._state.tuned_bytes_per_pack,
            )
            return bucket.replace([g for g, _ in pairs])
        return bucket


def init(optimizer, state, variables) -> None:
    """Calls each stage's `init` once (the hooked `build`)."""
    if state.stage_states is not None:
        return
    context = StageContext(optimizer, state)
    state.stage_states = [stage.init(list(variables), context) for stage in state.chain.stages]
    options = state.options
    if options.collective_streams and context.num_replicas > 1 and state.streams is None:
        state.streams = streams.Streams(
            context.strategy, options.collective_streams, options.collective_piece_bytes
        )


def rebind(optimizer, state, options) -> None:
    """Makes `options` the optimizer's, with their chain, after `build`.

    For `compression="auto"`, which decides after the first steps: the
    chain is made again from `options`; a stage equal to one of the old
    chain (the same user stage, a built-in with the same settings) keeps
    its state, any other is `init`ed now, as `build` would have.
    """
    old = list(zip(state.chain.stages, state.stage_states or []))
    state.options = options
    state.chain = options.chain()
    context = StageContext(optimizer, state)
    variables = list(optimizer._trainable_variables)
    states = []
    for stage in state.chain.stages:
        kept = [st for was, st in old if was == stage]
        states.append(kept[0] if kept else stage.init(variables, context))
    state.stage_states = states


def all_reduce(optimizer, state, grads_and_vars) -> list:
    """The step's (gradient, variable) pairs, each gradient summed.

    Args:
        optimizer: the hooked optimizer (replica context).
        state: its `hooks.OptimizerState` (chain, stage states).
        grads_and_vars: list of (gradient, variable).

    Returns:
        List of (SUM over replicas of the gradient, variable).
    """
    grads = [g for g, _ in grads_and_vars]
    out = list(grads)
    sparse = [i for i, g in enumerate(grads) if isinstance(g, tf.IndexedSlices)]
    if sparse:
        strategy = optimizer._distribution_strategy
        reduced = allreduce.all_reduce_sum([grads[i] for i in sparse], state.options, strategy)
        for i, r in zip(sparse, reduced):
            out[i] = r
    dense = _run(optimizer, state, grads, [v for _, v in grads_and_vars], _STEP_POSITIONS)
    out = [o if isinstance(g, tf.IndexedSlices) else d for o, g, d in zip(out, grads, dense)]
    return [(r, v) for r, (_, v) in zip(out, grads_and_vars)]


def run_local(optimizer, state, grads, variables) -> list:
    """This replica's gradients through the chain's `"local"` stages.

    The sharded update (`sharded_state`) calls it before its
    reduce-scatter, so a user `"local"` stage runs there as on the
    all-reduce path (`ZeRO.conflicts` refuses the other user positions).
    Sparse gradients (`tf.IndexedSlices`) and None pass through.
    """
    if not state.chain.at("local"):
        return list(grads)
    return _run(optimizer, state, list(grads), list(variables), ("local",))


def _run(optimizer, state, grads, variables, positions) -> list:
    """`grads` with the dense ones handed through the stages at `positions`."""
    out = list(grads)
    dense = [
        i for i, g in enumerate(grads) if g is not None and not isinstance(g, tf.IndexedSlices)
    ]
    context = StageContext(optimizer, state)
    # Stages see the Keras variables (`path`, `shape`), as their `init` did.
    keras_vars = optimizer._trainable_variables
    steps = [
        (stage, stage_state)
        for stage, stage_state in zip(
            state.chain.stages, state.stage_states or [None] * len(state.chain.stages)
        )
        if stage.position in positions
    ]
    for group in _groups(steps, [grads[i] for i in dense], state):
        bucket = Bucket(
            [grads[dense[j]] for j in group],
            [keras_vars[optimizer._get_variable_index(variables[dense[j]])] for j in group],
        )
        for stage, stage_state in steps:
            bucket = stage.reduce(bucket, stage_state, context)
        for j, g in zip(group, bucket.gradients):
            out[dense[j]] = g
    return out


def _groups(steps, dense_grads, state) -> list[list[int]]:
    """The buckets a step's dense gradients go through the stages in.

    With a user stage in the chain, the chain's `Pack` stage decides them,
    as DDP hands its hook one bucket at a time: each bucket holds the
    gradients of one pack (`allreduce.plan_buckets`; with
    `bytes_per_pack="auto"`, in backprop order, the last layer's first),
    so a user stage's `reduce` runs once per bucket and the collective it
    calls is that bucket's. With built-in stages only, the whole step is
    one bucket and the collective stage packs it (the packs are the same).
    """
    everything = [list(range(len(dense_grads)))]
    if not dense_grads or all(isinstance(stage, bs.BuiltinStage) for stage, _ in steps):
        return everything
    return allreduce.plan_buckets(dense_grads, state.options, state.tuned_bytes_per_pack)
