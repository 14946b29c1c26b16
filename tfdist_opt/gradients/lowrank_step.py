"""The PowerSGD step in the cross-replica context: TensorFlow binding.

`apply(...)` runs inside a `merge_call` (`lowrank.reduce`, and the
accumulated update of `accumulation`): before `powersgd_start_step` the
selected gradients are all-reduced uncompressed (`_plain_step`), from it
on through the power-iteration step (`_powersgd_step`: P all-reduce, QR,
Q all-reduce, error feedback), switched by a `tf.cond` on the update
counter, which is legal here and not in the replica context (see
`lowrank`'s module doc). The state it reads and writes (`lowrank.Entry`:
error buffer, Q) is made by `lowrank.init`. Its collectives are the
collective layer's cross-replica all-reduce (`collectives`): the
factors of one step travel as one pack each, the uncompressed step is
packed as the all-reduce path packs it.
"""

from __future__ import annotations

import tensorflow as tf

from tfdist_opt.gradients import collectives as collectives_lib
from tfdist_opt.gradients import factor_ops


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
