"""Runs a `Chain` of gradient stages in a hooked optimizer: TF binding.

`init(optimizer, state, variables)` (the hooked `build`) calls every
stage's `init` once, in chain order, keeps what they return in the
optimizer's `hooks.OptimizerState`, and makes the optimizer's collective
layer (`collectives.Collectives`: the `Cast` stage's wire dtype, the
`Pack` stage's packing, the streams). `all_reduce(optimizer, state,
grads_and_vars)` (the hooked `_all_reduce_sum_gradients`, replica context)
sends the sparse gradients (`tf.IndexedSlices`) through that layer, then
hands the step's dense gradients, one `Bucket` at a time (one per pack
when the chain holds a user stage, else one for the step), through the
stages at positions `"local"` to `"after"`, in order; the collective stage
returns the sums. `"accumulate"` and `"update"` stages act in the
optimizer's apply step instead (`accumulation`, `sharded_state`); the
sharded update runs the `"local"` stages first (`run_local`).

`StageContext` is what a stage's `init` and `reduce` get: the optimizer,
state creation, the collective layer. Each built-in stage's `init` and
`reduce` hold its own code (`builtin_stages`).
"""

from __future__ import annotations

import tensorflow as tf

from tfdist_opt.gradients.stages import builtin_stages as bs
from tfdist_opt.gradients.collectives import collectives
from tfdist_opt.gradients.binding import replica_slots
from tfdist_opt.gradients.stages.stage import Bucket

_STEP_POSITIONS = ("local", "wire", "pack", "collective", "after")


class StageContext:
    """What a stage's `init` and `reduce` are given.

    Attributes:
        optimizer: the Keras 3 optimizer the chain runs in.
        strategy: its `tf.distribute.Strategy`.
        num_replicas: int. Replicas summed by a collective.
        options: the `GradientOptions` the chain stands for (built-ins).
        chain: the `combine.Chain` the optimizer runs.
        collectives: the optimizer's collective layer
            (`collectives.Collectives`; made after every stage's `init`).
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

    @property
    def chain(self):
        """The `combine.Chain` the optimizer runs."""
        return self._state.chain

    @property
    def collectives(self) -> collectives.Collectives:
        """The optimizer's collective layer (replica context)."""
        return self._state.collectives

    def all_reduce_sum(self, tensors) -> list:
        """SUM over replicas of `tensors` (replica context), as a list.

        The chain's wire stage (`Cast`) decides the dtype they travel in
        and its pack stage (`Pack`) how they are grouped into collectives.
        """
        return self._state.collectives.all_reduce_sum(list(tensors))

    def autotune_pack_size(self, variables) -> int | None:
        """The measured pack size for these variables (multi-worker), kept.

        None where the autotune does not apply (`autotune=False`, one
        worker, a traced build).
        """
        tune = getattr(self._state.binding, "tuned_pack_size", None)
        if self.options.autotune and tune is not None:
            self._state.tuned_bytes_per_pack = tune(variables, codec(self.options))
        return self._state.tuned_bytes_per_pack


def init(optimizer, state, variables) -> None:
    """Calls each stage's `init` once (the hooked `build`), then makes the
    optimizer's collective layer from the chain (its `Cast` and `Pack`)."""
    if state.stage_states is not None:
        return
    context = StageContext(optimizer, state)
    state.stage_states = [stage.init(list(variables), context) for stage in state.chain.stages]
    state.collectives = _collectives(context, tokens=None)


def rebind(optimizer, state, options) -> None:
    """Makes `options` the optimizer's, with their chain, after `build`.

    For `compression="auto"`, which decides after the first steps: the
    chain is made again from `options`; a stage equal to one of the old
    chain (the same user stage, a built-in with the same settings) keeps
    its state, any other is `init`ed now, as `build` would have; the
    collective layer is made again around the same ordering tokens.
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
    state.collectives = _collectives(context, tokens=state.collectives.tokens)


def codec(options) -> collectives.Codec:
    """The wire dtype the chain's `Cast` stage (or none) stands for."""
    return collectives.Codec(options.wire_dtype, options.predivide)


def _collectives(context, tokens) -> collectives.Collectives:
    options = context.options
    return collectives.Collectives(
        context.strategy,
        codec(options),
        collectives.Packing(
            options.bytes_per_pack,
            context._state.tuned_bytes_per_pack,
            options.collective_streams,
            options.collective_piece_bytes,
        ),
        ordered=options.shard_optimizer_state,
        tokens=tokens,
    )


def all_reduce(optimizer, state, grads_and_vars, positions=_STEP_POSITIONS) -> list:
    """The step's (gradient, variable) pairs through the chain's step stages.

    Args:
        optimizer: the hooked optimizer (replica context).
        state: its `hooks.OptimizerState` (chain, stage states).
        grads_and_vars: list of (gradient, variable).
        positions: the stage positions to run. Defaults to every step
            position, `"local"` to `"after"`: each gradient comes back
            summed over the replicas.

    Returns:
        List of (gradient, variable). Sparse gradients (`tf.IndexedSlices`)
        take the collective layer's all-reduce, not the stages; None passes.
    """
    grads = [g for g, _ in grads_and_vars]
    variables = [v for _, v in grads_and_vars]
    out = list(grads)
    dense, sparse = collectives.split(grads)
    if sparse and "collective" in positions:
        for i, r in zip(sparse, state.collectives.all_reduce_sum([grads[i] for i in sparse])):
            out[i] = r
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
    return list(zip(out, variables))


def run_local(optimizer, state, grads, variables) -> list:
    """This replica's gradients through the chain's `"local"` stages.

    The sharded update (`sharded_state`) calls it before its
    reduce-scatter, so a user `"local"` stage runs there as on the
    all-reduce path (`ZeRO.conflicts` refuses the other user positions).
    Sparse gradients (`tf.IndexedSlices`) and None pass through.
    """
    if not state.chain.at("local"):
        return list(grads)
    pairs = all_reduce(optimizer, state, list(zip(grads, variables)), ("local",))
    return [g for g, _ in pairs]


def _groups(steps, dense_grads, state) -> list[list[int]]:
    """The buckets a step's dense gradients go through the stages in.

    With a user stage in the chain, the chain's `Pack` stage decides them,
    as DDP hands its hook one bucket at a time: each bucket holds the
    gradients of one pack (`Packing.buckets`; with `bytes_per_pack="auto"`,
    in backprop order, the last layer's first), so a user stage's `reduce`
    runs once per bucket and the collective it calls is that bucket's.
    With built-in stages only, the whole step is one bucket and the
    collective packs it (the packs are the same).
    """
    everything = [list(range(len(dense_grads)))]
    if not dense_grads or all(isinstance(stage, bs.BuiltinStage) for stage, _ in steps):
        return everything
    return state.collectives.packing.buckets(dense_grads)
