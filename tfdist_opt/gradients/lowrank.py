"""The PowerSGD gradient stage: TensorFlow binding.

Two calls, the shape every stateful stage of the gradient path has:

* `init(optimizer, variables, options) -> PowerSGDState`: plans the
  selection (`powersgd.plan`, static shapes) and creates the state as
  optimizer variables (`add_variable_from_reference` / `add_variable`, so
  `optimizer.variables`, `tf.train.Checkpoint(optimizer=...)`, `model.save`
  and our backups carry it):
    - one error buffer per compressed matrix, `synchronization=ON_READ,
      aggregation=SUM` like the accumulators (each replica keeps its own
      residual with no communication; reading it gives the sum). It is a
      `replica_slots.PerReplicaSum`: a checkpoint holds every replica's
      residual (n, *shape), and a restore with the same replica count gives
      each replica its own, bit for bit; another replica count, or an older
      checkpoint holding the sum, gives each replica sum / n (the next
      step's total is unchanged, its float rounding is not);
    - one Q (cols x r) per compressed matrix, mirrored, drawn from a normal
      distribution with `numpy.random.default_rng([seed, j])`, so every
      replica and every worker starts from the same Q.
* `lowrank_step.apply(...)`: in the *cross-replica* context (inside
  `merge_call`), the step of `powersgd` on the selected gradients: two
  collectives per step (all P's and the uncompressed dense rest in one
  pack, all Q's in one pack), returning per-replica SUMs like the
  uncompressed path.

Why cross-replica: before `powersgd_start_step` the selected gradients go
uncompressed, and the switch is a `tf.cond` on the update counter. A
`tf.cond` whose branches all-reduce from the *replica* context fails under
MirroredStrategy (`ReplicaContext.all_reduce` is a `merge_call`, refused
inside a cond branch: "merge_call called while defining a new graph or a
tf.function"; keras-team/keras#17429, tf-keras#107). In the cross-replica
context `extended.batch_reduce_to` inside a `tf.cond` is legal (the
accumulation path relies on it too), and every worker takes the same
branch because the counter is the same everywhere. The per-replica
matrix products run explicitly on each local device.

`all_reduce_sum(optimizer, grads_and_vars, state)` is the replica-context
entry (the hooked `_all_reduce_sum_gradients`): one `merge_call` takes the
selected gradients and the dense ones PowerSGD does not compress; the
latter are cast to `powersgd_wire` and ride in the P factors' collective,
so a step is two collectives in all. Sparse gradients go through
`allreduce.all_reduce_sum`.
"""

from __future__ import annotations

import dataclasses

from absl import logging
import tensorflow as tf

from tfdist_opt import runtime
from tfdist_opt.gradients import allreduce
from tfdist_opt.gradients import factor_ops
from tfdist_opt.gradients import lowrank_step
from tfdist_opt.gradients import powersgd
from tfdist_opt.gradients import replica_slots
from tfdist_opt.gradients.options import GradientOptions

ERROR_NAME = "tfdist_powersgd_error"
Q_NAME = "tfdist_powersgd_q"


@dataclasses.dataclass
class Entry:
    """One compressed matrix: its plan line and its two state variables."""

    matrix: powersgd.Matrix
    error: object  # Keras variable, ON_READ SUM, the gradient's shape
    q: object  # Keras variable, mirrored, (cols, rank)


@dataclasses.dataclass
class PowerSGDState:
    """What `init` made for one optimizer.

    Attributes:
        plan: `powersgd.Plan` over the optimizer's trainable variables.
        entries: dict. Variable index -> `Entry`, for each compressed one.
        options: `GradientOptions`.
    """

    plan: powersgd.Plan
    entries: dict
    options: GradientOptions

    @property
    def error_buffers(self) -> list:
        return [e.error for e in self.entries.values()]

    @property
    def q_factors(self) -> list:
        return [e.q for e in self.entries.values()]


def init(optimizer, variables, options: GradientOptions) -> PowerSGDState:
    """Creates (once) the PowerSGD state of `optimizer` as its variables.

    Args:
        optimizer: a Keras 3 TF optimizer, being built.
        variables: its trainable variables, in its variable order.
        options: `GradientOptions` with `compression="powersgd"`.

    Returns:
        The `PowerSGDState`, also kept on the optimizer (`state_of`).
    """
    existing = state_of(optimizer)
    if existing is not None:
        return existing
    plan = powersgd.plan(
        [tuple(v.shape) for v in variables],
        [_dtype_name(v.dtype) for v in variables],
        options.powersgd_rank,
        options.powersgd_min_compression,
        options.powersgd_wire,
    )
    strategy = optimizer._distribution_strategy
    entries = {}
    with replica_slots.creation_scope(strategy):
        for j, m in enumerate(plan.matrices):
            var = variables[m.index]
            error = replica_slots.add_slot(
                optimizer,
                var,
                ERROR_NAME,
                var.shape,
                "zeros",
                replica_slots.on_read_sum,
                replica_slots.PerReplicaSum,
                _tfdist_strategy=strategy,
            )
            q = optimizer.add_variable(
                shape=(m.cols, m.rank),
                dtype=_dtype_name(var.dtype),
                initializer=factor_ops.SeededNormal(options.powersgd_seed, j),
                name=f"{_sanitized(var)}_{Q_NAME}",
            )
            entries[m.index] = Entry(m, error, q)
    state = PowerSGDState(plan, entries, options)
    runtime.OBJECTS.of(optimizer).powersgd = state
    logging.info(
        "tfdist_opt gradients: %s (rank %d, from update %d, min compression %s, wire %s)",
        plan.describe(),
        options.powersgd_rank,
        options.powersgd_start_step,
        options.powersgd_min_compression,
        options.powersgd_wire,
    )
    return state


def state_of(optimizer) -> PowerSGDState | None:
    """The optimizer's `PowerSGDState`, or None before `init`."""
    state = runtime.OBJECTS.get(optimizer)
    return None if state is None else state.powersgd


def all_reduce_sum(
    optimizer, grads_and_vars, state: PowerSGDState, tuned: int | None = None
) -> list:
    """SUM all-reduce of one step's gradients from a replica context.

    The dense gradients PowerSGD does not compress (biases, small matrices)
    travel in the same collective as the P factors, so a step costs two
    collectives, not three: on a latency-bound transport a small
    all-reduce costs as much as a large one (docs/benchmarks-appendix.md, "Figures
    behind the gradient path's design"). Sparse gradients (`tf.IndexedSlices`) go through
    `allreduce.all_reduce_sum` (TF's gather) first.

    Args:
        optimizer: the hooked optimizer (its update counter and strategy).
        grads_and_vars: list of (gradient, variable).
        state: its `PowerSGDState`.
        tuned: int or None. Autotuned pack size for the uncompressed rest
            before `powersgd_start_step`.

    Returns:
        List of (reduced gradient, variable), each reduced gradient the SUM
        over replicas (exact before `powersgd_start_step`, low-rank after).
    """
    grads = [g for g, _ in grads_and_vars]
    index = [optimizer._get_variable_index(v) for _, v in grads_and_vars]
    selected = [
        k
        for k, g in enumerate(grads)
        if index[k] in state.entries and g is not None and not isinstance(g, tf.IndexedSlices)
    ]
    chosen = set(selected)
    dense_rest = [
        k
        for k, g in enumerate(grads)
        if k not in chosen and g is not None and not isinstance(g, tf.IndexedSlices)
    ]
    sparse = [k for k, g in enumerate(grads) if isinstance(g, tf.IndexedSlices)]
    out = list(grads)
    strategy = optimizer._distribution_strategy
    if sparse:
        for k, r in zip(
            sparse, allreduce.all_reduce_sum([grads[k] for k in sparse], state.options, strategy)
        ):
            out[k] = r
    if selected or dense_rest:
        entries = [state.entries[index[k]] for k in selected]
        counter = optimizer._iterations

        def cross_replica(distribution, values, rest):
            return lowrank_step.apply(
                distribution,
                list(values),
                entries,
                tf.convert_to_tensor(counter),
                state.options,
                rest=list(rest),
                tuned=tuned,
            )

        reduced = tf.distribute.get_replica_context().merge_call(
            cross_replica,
            args=(
                tuple(tf.convert_to_tensor(grads[k]) for k in selected),
                tuple(tf.convert_to_tensor(grads[k]) for k in dense_rest),
            ),
        )
        for k, r in zip(selected + dense_rest, reduced):
            out[k] = r
    return [(r, v) for r, (_, v) in zip(out, grads_and_vars)]


def _sanitized(var) -> str:
    # The name Keras's add_variable_from_reference gives (path, "/" -> "_").
    return getattr(var, "path", var.name).replace("/", "_").replace(":", "_")


def _dtype_name(dtype) -> str:
    return getattr(dtype, "name", dtype)
