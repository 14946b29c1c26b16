"""The PowerSGD step in the cross-replica context: TensorFlow binding.

`apply(...)` runs inside a `merge_call` (`lowrank.all_reduce_sum`, and the
accumulated update of `accumulation`): before `powersgd_start_step` the
selected gradients are all-reduced uncompressed (`_plain_step`), from it
on through the power-iteration step (`_powersgd_step`: P all-reduce, QR,
Q all-reduce, error feedback), switched by a `tf.cond` on the update
counter, which is legal here and not in the replica context (see
`lowrank`'s module doc). The state it reads and writes (`lowrank.Entry`:
error buffer, Q) is made by `lowrank.init`.
"""

from __future__ import annotations

import tensorflow as tf

from tfdist_opt.gradients import allreduce
from tfdist_opt.gradients import factor_ops
from tfdist_opt.gradients.options import GradientOptions

# The factors of one step travel as one pack each (one collective).
_ONE_PACK = GradientOptions(bytes_per_pack=0)


def apply(
    distribution,
    grads,
    entries,
    update: tf.Tensor,
    options: GradientOptions,
    rest=(),
    tuned: int | None = None,
) -> list:
    """The PowerSGD step on the selected gradients (cross-replica context).

    Args:
        distribution: the strategy (as a `merge_call` function gets it).
        grads: list of per-replica dense gradients (local, unreduced).
        entries: list of `lowrank.Entry`, one per gradient.
        update: scalar int tensor. The update's index (0-based): before
            `powersgd_start_step` the gradients are all-reduced uncompressed.
        options: `GradientOptions`.
        rest: list of per-replica dense gradients PowerSGD does not compress:
            cast to the wire and summed in the same collective as the P
            factors (before the start step: packed with the selected ones).
        tuned: int or None. Autotuned pack size for the uncompressed step.

    Returns:
        List of per-replica values: the SUM over replicas of each of `grads`,
        then of each of `rest`.
    """
    devices = distribution.extended.worker_devices
    local = [_local_results(distribution, g, len(devices)) for g in grads]
    rest_local = [_local_results(distribution, g, len(devices)) for g in rest]

    def compressed():
        with tf.name_scope("powersgd"):  # names the step's ops in profiles
            return _powersgd_step(distribution, devices, local, entries, options, rest_local)

    def uncompressed():
        return _plain_step(distribution, devices, local + rest_local, options, tuned)

    start = options.powersgd_start_step
    if not entries or start == 0:
        flat = compressed() if entries else uncompressed()
    else:
        flat = tf.cond(update >= start, compressed, uncompressed)
    nd = len(devices)
    return [
        _per_replica(distribution, flat[j * nd : (j + 1) * nd])
        for j in range(len(grads) + len(rest))
    ]


def _powersgd_step(distribution, devices, local, entries, options, rest_local) -> list:
    """One power-iteration step; returns the flat (tensor-major) results.

    The error buffer holds M = g + e in place (`assign_add`); after the Q
    collective the buffer keeps M - (P^ Q^T) / n, the residual against the
    averaged approximation (PyTorch's hook), subtracted in place by one
    fused `ResourceApplyGradientDescent` from the approximation the step
    returns anyway: no per-replica outer product and no second full-size
    temporary (faster on one core: docs/benchmarks-appendix.md, "Figures behind the
    gradient path's design"). Q_i is computed as (P^T M)^T, which
    reads M row by row (faster on CPU than M^T P for these skinny
    products). All three products run through XLA on CPU
    (`factor_ops.skinny_matmul`).
    """
    nd, count = len(devices), len(entries)
    inv_n = 1.0 / distribution.num_replicas_in_sync
    ms, ps = [[None] * count for _ in range(nd)], []
    for d, dev in enumerate(devices):
        with tf.device(dev):
            for j, e in enumerate(entries):
                err = distribution.experimental_local_results(e.error.value)[d]
                q = distribution.experimental_local_results(e.q.value)[d]
                g = tf.reshape(tf.cast(local[j][d], err.dtype), err.shape)
                m = tf.reshape(err.assign_add(g, read_value=True), [e.matrix.rows, e.matrix.cols])
                ms[d][j] = m
                ps.append(factor_ops.skinny_matmul(m, factor_ops.orthonormal(q.read_value()), dev))
            ps.extend(rest_local[i][d] for i in range(len(rest_local)))
    summed = _reduce(distribution, devices, ps, count + len(rest_local), options)
    qs, p_hat = [], [[None] * count for _ in range(nd)]
    for d, dev in enumerate(devices):
        with tf.device(dev):
            for j in range(count):
                ph = factor_ops.orthonormal(summed[d][j])
                p_hat[d][j] = ph
                qs.append(
                    tf.transpose(factor_ops.skinny_matmul(ph, ms[d][j], dev, transpose_a=True))
                )
    q_sum = _reduce(distribution, devices, qs, count, options)
    flat = [None] * ((count + len(rest_local)) * nd)
    for d, dev in enumerate(devices):
        with tf.device(dev):
            for j, e in enumerate(entries):
                q_var = distribution.experimental_local_results(e.q.value)[d]
                q_var.assign(q_sum[d][j])
                err = distribution.experimental_local_results(e.error.value)[d]
                approx = tf.reshape(
                    factor_ops.skinny_matmul(p_hat[d][j], q_sum[d][j], dev, transpose_b=True),
                    err.shape,
                )
                tf.raw_ops.ResourceApplyGradientDescent(
                    var=err.handle, alpha=tf.constant(inv_n, err.dtype), delta=approx
                )
                g = local[j][d]
                flat[j * nd + d] = tf.cast(tf.reshape(approx, tf.shape(g)), g.dtype)
            for i in range(len(rest_local)):
                flat[(count + i) * nd + d] = summed[d][count + i]
    return flat


def _plain_step(distribution, devices, local, options, tuned=None) -> list:
    """Uncompressed SUM of per-device gradients (cast to the wire, packed)."""
    nd, count = len(devices), len(local)
    values = [local[j][d] for d in range(nd) for j in range(count)]
    reduced = _reduce(distribution, devices, values, count, options, packing=options, tuned=tuned)
    return [reduced[d][j] for j in range(count) for d in range(nd)]


def _reduce(distribution, devices, values, count, options, packing=_ONE_PACK, tuned=None):
    """SUM over replicas of `count` tensors per device (device-major list).

    Casts to the wire dtype and back per device; `packing` decides the
    packs (`_ONE_PACK`: all in one collective).
    """
    nd = len(devices)
    n = distribution.num_replicas_in_sync
    wire, metas = [], []
    for j in range(count):
        per_dev = []
        for d, dev in enumerate(devices):
            with tf.device(dev):
                sent, meta = allreduce.compress(values[d * count + j], options, n)
            per_dev.append(sent)
        metas.append(meta)
        wire.append(_per_replica(distribution, per_dev))
    reduced = allreduce.cross_replica_reduce_sum(distribution, wire, wire, packing, tuned=tuned)
    out = [[None] * count for _ in range(nd)]
    for j, r in enumerate(reduced):
        for d, (dev, v) in enumerate(zip(devices, distribution.experimental_local_results(r))):
            with tf.device(dev):
                out[d][j] = allreduce.decompress(v, metas[j])
    return out


def _local_results(distribution, value, nd: int) -> tuple:
    """`value`'s component on each local device, one per device.

    A tensor every replica passed as the same object (a gradient made
    outside `strategy.run`, as `benchmarks/allreduce.py` does) reaches
    `merge_call` as that one tensor, not a per-replica value: it is every
    device's component.
    """
    out = tuple(distribution.experimental_local_results(value))
    return out * nd if len(out) == 1 and nd > 1 else out


def _per_replica(distribution, per_device: list):
    if len(per_device) == 1 and distribution.num_replicas_in_sync == 1:
        return per_device[0]
    nd = len(per_device)
    return distribution.experimental_distribute_values_from_function(
        lambda ctx: per_device[ctx.replica_id_in_sync_group % nd]
    )
