"""The PowerSGD gradient stage: TensorFlow binding.

Two calls, the shape every stateful stage of the gradient path has:

* `init(optimizer, variables, stage, wire) -> PowerSGDState`: plans the
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
* `apply(...)`: in the *cross-replica* context (inside `merge_call`:
  `reduce`, and the accumulated update of `accumulation`), the step of
  `powersgd` on the selected gradients: before `powersgd_start_step` the
  selected gradients are all-reduced uncompressed, from it on through the
  power-iteration step (`_powersgd_step`: P all-reduce, QR, Q all-reduce,
  error feedback), switched by a `tf.cond` on the update counter. Two
  collectives per step (all P's and the uncompressed dense rest in one
  pack, all Q's in one pack) through the collective layer's cross-replica
  all-reduce, returning per-replica SUMs like the uncompressed path.

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

`reduce(optimizer, bucket, state, collectives)` is the replica-context
entry (the `PowerSGD` stage's `reduce`): one `merge_call` takes the
selected gradients and the dense ones PowerSGD does not compress; the
latter are cast to the wire dtype and ride in the P factors' collective,
so a step is two collectives in all. Sparse gradients never reach it
(`chain_binding.all_reduce` sends them through the collective layer).
"""

from __future__ import annotations

import dataclasses

from absl import logging
import tensorflow as tf

from tfdist_opt import runtime
from tfdist_opt.gradients.collectives import collectives as collectives_lib
from tfdist_opt.gradients.powersgd import factor_ops
from tfdist_opt.gradients.powersgd import powersgd
from tfdist_opt.gradients.binding import replica_slots

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
        start_step: int. The first update PowerSGD compresses.
    """

    plan: powersgd.Plan
    entries: dict
    start_step: int

    @property
    def error_buffers(self) -> list:
        return [e.error for e in self.entries.values()]

    @property
    def q_factors(self) -> list:
        return [e.q for e in self.entries.values()]


def init(optimizer, variables, stage, wire: str) -> PowerSGDState:
    """Creates (once) the PowerSGD state of `optimizer` as its variables.

    Args:
        optimizer: a Keras 3 TF optimizer, being built.
        variables: its trainable variables, in its variable order.
        stage: the `builtin_stages.PowerSGD` stage (its settings).
        wire: str. `"none"`, `"bf16"` or `"fp16"`: the chain's `Cast`.

    Returns:
        The `PowerSGDState`, also kept on the optimizer (`state_of`).
    """
    existing = state_of(optimizer)
    if existing is not None:
        return existing
    plan = powersgd.plan(
        [tuple(v.shape) for v in variables],
        [_dtype_name(v.dtype) for v in variables],
        stage.rank,
        stage.min_compression,
        wire,
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
                initializer=factor_ops.SeededNormal(stage.seed, j),
                name=f"{_sanitized(var)}_{Q_NAME}",
            )
            entries[m.index] = Entry(m, error, q)
    state = PowerSGDState(plan, entries, stage.start_step)
    runtime.OBJECTS.of(optimizer).powersgd = state
    logging.info(
        "tfdist_opt gradients: %s (rank %d, from update %d, min compression %s, wire %s)",
        plan.describe(),
        stage.rank,
        stage.start_step,
        stage.min_compression,
        wire,
    )
    return state


def state_of(optimizer) -> PowerSGDState | None:
    """The optimizer's `PowerSGDState`, or None before `init`."""
    state = runtime.OBJECTS.get(optimizer)
    return None if state is None else state.powersgd


def reduce(optimizer, bucket, state: PowerSGDState, collectives) -> list:
    """SUM over replicas of one bucket's dense gradients (replica context).

    The dense gradients PowerSGD does not compress (biases, small matrices)
    travel in the same collective as the P factors, so a step costs two
    collectives, not three: on a latency-bound transport a small
    all-reduce costs as much as a large one (docs/benchmarks-appendix.md, "Figures
    behind the gradient path's design").

    Args:
        optimizer: the hooked optimizer (its update counter).
        bucket: a `stage.Bucket` of dense gradients (None passes through).
        state: its `PowerSGDState`.
        collectives: the optimizer's `collectives.Collectives` (wire dtype,
            packing of the uncompressed step before `start_step`).

    Returns:
        The list of reduced gradients, each the SUM over replicas (exact
        before `start_step`, low-rank after).
    """
    grads = bucket.gradients
    index = [optimizer._get_variable_index(v) for v in bucket.variables]
    present = [k for k, g in enumerate(grads) if g is not None]
    selected = [k for k in present if index[k] in state.entries]
    chosen = set(selected)
    dense_rest = [k for k in present if k not in chosen]
    out = list(grads)
    if present:
        entries = [state.entries[index[k]] for k in selected]
        counter = optimizer._iterations

        def cross_replica(distribution, values, rest):
            return apply(
                collectives.cross_replica(distribution),
                list(values),
                entries,
                tf.convert_to_tensor(counter),
                state.start_step,
                rest=list(rest),
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
    return out


def apply(collectives, grads, entries, update: tf.Tensor, start_step: int, rest=()) -> list:
    """The PowerSGD step on the selected gradients (cross-replica context).

    Args:
        collectives: a `collectives.CrossReplicaCollectives` (the strategy
            as the `merge_call` function got it, the wire dtype, packing).
        grads: list of per-replica dense gradients (local, unreduced).
        entries: list of `lowrank.Entry`, one per gradient.
        update: scalar int tensor. The update's index (0-based): before
            `start_step` the gradients are all-reduced uncompressed.
        start_step: int. The first compressed update.
        rest: list of per-replica dense gradients PowerSGD does not compress:
            cast to the wire and summed in the same collective as the P
            factors (before the start step: packed with the selected ones).

    Returns:
        List of per-replica values: the SUM over replicas of each of `grads`,
        then of each of `rest`.
    """
    distribution = collectives.distribution
    local = [collectives_lib.local_results(distribution, g) for g in grads]
    rest_local = [collectives_lib.local_results(distribution, g) for g in rest]

    def compressed():
        with tf.name_scope("powersgd"):  # names the step's ops in profiles
            return _powersgd_step(collectives, local, entries, rest_local)

    def uncompressed():
        return collectives.all_reduce_sum(local + rest_local)

    if not entries or start_step == 0:
        summed = compressed() if entries else uncompressed()
    else:
        # tf.cond wants flat outputs: tensor-major, one per device.
        nd = len(collectives.devices)
        flat = tf.cond(
            update >= start_step,
            lambda: [t for per_dev in compressed() for t in per_dev],
            lambda: [t for per_dev in uncompressed() for t in per_dev],
        )
        summed = [flat[j * nd : (j + 1) * nd] for j in range(len(grads) + len(rest))]
    return [collectives_lib.per_replica(distribution, list(per_dev)) for per_dev in summed]


def _powersgd_step(collectives, local, entries, rest_local) -> list:
    """One power-iteration step; returns the sums, one list per tensor, one per device.

    The error buffer holds M = g + e in place (`assign_add`); after the Q
    collective the buffer keeps M - (P^ Q^T) / n, the residual against the
    averaged approximation (PyTorch's hook), subtracted in place by one
    fused `ResourceApplyGradientDescent` from the approximation the step
    returns anyway: no per-replica outer product and no second full-size
    temporary (faster on one core: docs/benchmarks.md, "Figures behind the
    gradient path's design"). Q_i is computed as (P^T M)^T, which
    reads M row by row (faster on CPU than M^T P for these skinny
    products). All three products run through XLA on CPU
    (`factor_ops.skinny_matmul`).
    """
    distribution, devices = collectives.distribution, collectives.devices
    count = len(entries)
    inv_n = 1.0 / distribution.num_replicas_in_sync
    ms = [[None] * len(devices) for _ in range(count)]
    ps = [[None] * len(devices) for _ in range(count)]
    for d, dev in enumerate(devices):
        with tf.device(dev):
            for j, e in enumerate(entries):
                err = distribution.experimental_local_results(e.error.value)[d]
                q = distribution.experimental_local_results(e.q.value)[d]
                g = tf.reshape(tf.cast(local[j][d], err.dtype), err.shape)
                m = tf.reshape(err.assign_add(g, read_value=True), [e.matrix.rows, e.matrix.cols])
                ms[j][d] = m
                ps[j][d] = factor_ops.skinny_matmul(m, factor_ops.orthonormal(q.read_value()), dev)
    summed = collectives.all_reduce_sum(ps + list(rest_local), one_pack=True)
    qs = [[None] * len(devices) for _ in range(count)]
    p_hat = [[None] * len(devices) for _ in range(count)]
    for d, dev in enumerate(devices):
        with tf.device(dev):
            for j in range(count):
                ph = factor_ops.orthonormal(summed[j][d])
                p_hat[j][d] = ph
                qs[j][d] = tf.transpose(
                    factor_ops.skinny_matmul(ph, ms[j][d], dev, transpose_a=True)
                )
    q_sum = collectives.all_reduce_sum(qs, one_pack=True)
    out = [[None] * len(devices) for _ in range(count)] + summed[count:]
    for d, dev in enumerate(devices):
        with tf.device(dev):
            for j, e in enumerate(entries):
                q_var = distribution.experimental_local_results(e.q.value)[d]
                q_var.assign(q_sum[j][d])
                err = distribution.experimental_local_results(e.error.value)[d]
                approx = tf.reshape(
                    factor_ops.skinny_matmul(p_hat[j][d], q_sum[j][d], dev, transpose_b=True),
                    err.shape,
                )
                tf.raw_ops.ResourceApplyGradientDescent(
                    var=err.handle, alpha=tf.constant(inv_n, err.dtype), delta=approx
                )
                g = local[j][d]
                out[j][d] = tf.cast(tf.reshape(approx, tf.shape(g)), g.dtype)
    return out


def _sanitized(var) -> str:
    # The name Keras's add_variable_from_reference gives (path, "/" -> "_").
    return getattr(var, "path", var.name).replace("/", "_").replace(":", "_")


def _dtype_name(dtype) -> str:
    return getattr(dtype, "name", dtype)
