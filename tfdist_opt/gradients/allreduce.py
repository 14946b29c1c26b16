"""The compressed, bucketed gradient all-reduce: TensorFlow binding.

One function per context, both built from the same pieces:

* `all_reduce_sum(grads, options)` in a *replica* context: what a hooked
  optimizer's `_all_reduce_sum_gradients` calls (`hooks`; one
  `ReplicaContext.all_reduce` per bucket);
* `cross_replica_reduce_sum(distribution, per_replica, options)` in a
  *cross-replica* context (inside `merge_call`): what gradient accumulation
  calls once every k steps, inside a `tf.cond` (one
  `extended.batch_reduce_to` per bucket).

Pieces, in order: `compress` (cast float gradients wider than the wire
dtype; fp16 pre-divided by the replica count, see `precision.py`), buckets
(`packing.assign_buckets` over the static byte sizes, per wire dtype so a
pack can be concatenated), one collective per bucket (TF concatenates the
bucket and runs one RING/NCCL collective; we pass `bytes_per_pack` at least
the bucket's size so TF does not split it again), `decompress` (cast back,
multiply back). Sparse gradients (`tf.IndexedSlices`) bypass compression
and packing and go through TF's own all-reduce.

With a `streams.Streams` (`collective_streams`, the multi-worker RING
default), `all_reduce_sum` sends the compressed dense gradients as pieces,
several in flight, instead of one collective per bucket.

All decisions are taken at trace time from static shapes, so every worker
traces the same collectives in the same order.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from absl import logging
import tensorflow as tf

from tfdist_opt.gradients import packing
from tfdist_opt.gradients import precision
from tfdist_opt.gradients import streams as streams_lib
from tfdist_opt.gradients.options import GradientOptions

_LOGGED: set[str] = set()


@dataclasses.dataclass(frozen=True)
class _Wire:
    """How one gradient travels: original dtype, wire dtype, pre-division."""

    dtype: tf.DType
    wire: tf.DType
    factor: int


def pack_policy(
    options: GradientOptions, sizes: Sequence[int], tuned: int | None = None
) -> packing.PackPolicy:
    """The packing policy for these gradient byte sizes.

    With `bytes_per_pack="auto"`, an autotuned size (`tuned`, measured by
    `autotune` for these shapes) wins over the `"auto"` policy.
    """
    bpp = options.bytes_per_pack
    if bpp == "auto":
        if tuned is not None:
            # Reverse (backprop) order, like the "auto" policy: TF runs a
            # replica's collectives in issue order, so a first pack holding
            # the first layer (its gradient comes last) holds back every pack.
            return dataclasses.replace(
                packing.fixed_policy(tuned),
                reverse=True,
                reason=f"autotuned: {tuned} bytes, reverse (backprop) order",
            )
        return packing.auto_pack_policy(sizes)
    return packing.fixed_policy(bpp)


def compress(
    grad: tf.Tensor, options: GradientOptions, num_replicas: int
) -> tuple[tf.Tensor, _Wire]:
    """Casts one dense gradient to its wire dtype (fp16: / n first)."""
    dtype = grad.dtype
    wire_name = precision.compress_dtype(dtype.name, options.wire_dtype)
    if wire_name is None:
        return grad, _Wire(dtype, dtype, 1)
    factor = precision.predivide_factor(wire_name, num_replicas, options.predivide)
    if factor != 1:
        grad = grad / tf.cast(factor, dtype)
    wire = tf.as_dtype(wire_name)
    return tf.cast(grad, wire), _Wire(dtype, wire, factor)


def decompress(reduced: tf.Tensor, meta: _Wire) -> tf.Tensor:
    """Casts a reduced gradient back (and multiplies the pre-division back)."""
    if meta.wire == meta.dtype:
        return reduced
    out = tf.cast(reduced, meta.dtype)
    if meta.factor != 1:
        out = out * tf.cast(meta.factor, meta.dtype)
    return out


def plan_buckets(
    tensors: Sequence[tf.Tensor], options: GradientOptions, tuned: int | None = None
) -> list[list[int]]:
    """Index buckets over `tensors` (already in wire dtype), per dtype."""
    by_dtype: dict[tf.DType, list[int]] = {}
    for i, t in enumerate(tensors):
        by_dtype.setdefault(t.dtype, []).append(i)
    sizes_all = [_nbytes(t) for t in tensors]
    buckets: list[list[int]] = []
    for dtype, idx in by_dtype.items():
        sizes = [sizes_all[i] for i in idx]
        if any(s is None for s in sizes):  # unknown shape: one pack, as TF
            buckets.append(idx)
            continue
        policy = pack_policy(options, sizes, tuned)
        groups = packing.assign_buckets(sizes, policy)
        buckets.extend([idx[j] for j in g] for g in groups)
        _log_once(
            f"tfdist_opt gradients: {len(idx)} {dtype.name} tensors, "
            f"{sum(sizes)} bytes -> {len(groups)} pack(s): "
            f"{policy.describe()} ({policy.reason})"
        )
    return buckets


def all_reduce_sum(
    grads: Sequence[tf.Tensor | tf.IndexedSlices | None],
    options: GradientOptions,
    strategy: tf.distribute.Strategy | None = None,
    tuned: int | None = None,
    streams: "streams_lib.Streams | None" = None,
) -> list:
    """SUM all-reduce of `grads` from a replica context, compressed + packed.

    Args:
        grads: list of dense tensors, `tf.IndexedSlices` or None (kept).
        options: `GradientOptions`.
        strategy: the strategy (its replica count). Defaults to the current
            one.
        tuned: int or None. Autotuned pack size (see `pack_policy`).
        streams: `streams.Streams` or None. With one (`collective_streams`),
            the dense gradients travel as pieces, several in flight,
            instead of one collective per pack.

    Returns:
        List like `grads`, each the sum over all replicas, in the input dtype.
    """
    ctx = tf.distribute.get_replica_context()
    strategy = strategy or tf.distribute.get_strategy()
    n = strategy.num_replicas_in_sync
    out: list = list(grads)
    dense = [
        i for i, g in enumerate(grads) if g is not None and not isinstance(g, tf.IndexedSlices)
    ]
    sparse = [i for i, g in enumerate(grads) if isinstance(g, tf.IndexedSlices)]
    if sparse:
        reduced = ctx.all_reduce(tf.distribute.ReduceOp.SUM, [grads[i] for i in sparse])
        for i, r in zip(sparse, reduced):
            out[i] = r
    if not dense:
        return out
    values = [tf.convert_to_tensor(grads[i]) for i in dense]
    if streams is not None and all(_nbytes(v) is not None for v in values):
        codec = streams_lib.Codec(
            encode=lambda x: compress(x, options, n),
            decode=decompress,
            wire_size=lambda dtype: (
                tf.as_dtype(precision.compress_dtype(dtype.name, options.wire_dtype) or dtype).size
            ),
        )
        reduced = streams_lib.all_reduce_sum(values, streams, codec)
        for j, r in enumerate(reduced):
            out[dense[j]] = r
        return out
    sent = [compress(v, options, n) for v in values]
    wire = [s for s, _ in sent]
    for bucket in plan_buckets(wire, options, tuned):
        values = [wire[j] for j in bucket]
        reduced = ctx.all_reduce(tf.distribute.ReduceOp.SUM, values, options=_one_pack(values))
        for j, r in zip(bucket, reduced):
            out[dense[j]] = decompress(r, sent[j][1])
    return out


def compress_all(
    grads: Sequence[tf.Tensor], options: GradientOptions, num_replicas: int
) -> tuple[list[tf.Tensor], list[_Wire]]:
    """`compress` over a list of dense gradients (replica context)."""
    pairs = [compress(tf.convert_to_tensor(g), options, num_replicas) for g in grads]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def cross_replica_reduce_sum(
    distribution: tf.distribute.Strategy,
    wire: Sequence,
    destinations: Sequence,
    options: GradientOptions,
    tuned: int | None = None,
) -> list:
    """SUM-reduces per-replica wire values from a cross-replica context.

    Args:
        distribution: the strategy (as handed to a `merge_call` function).
        wire: list of per-replica values already compressed (`compress_all`
            in the replica context).
        destinations: list of variables, one per value (placement).
        options: `GradientOptions` (packing).
        tuned: int or None. Autotuned pack size (see `pack_policy`).

    Returns:
        List of mirrored reduced values, still in the wire dtype: apply
        `decompress` per device (e.g. inside `extended.update`).
    """
    local = [distribution.experimental_local_results(w)[0] for w in wire]
    out: list = [None] * len(wire)
    for bucket in plan_buckets(local, options, tuned):
        pairs = [(wire[j], destinations[j]) for j in bucket]
        reduced = distribution.extended.batch_reduce_to(
            tf.distribute.ReduceOp.SUM, pairs, options=_one_pack([local[j] for j in bucket])
        )
        for j, r in zip(bucket, reduced):
            out[j] = r
    return out


def _one_pack(values) -> tf.distribute.experimental.CommunicationOptions:
    # TF re-groups a batch by bytes_per_pack (and a 0 here would not override
    # the strategy's own value): ask for packs at least as large as the
    # bucket so each bucket is exactly one collective.
    total = sum(_nbytes(v) or 0 for v in values)
    return tf.distribute.experimental.CommunicationOptions(bytes_per_pack=max(1, total + 1))


def _nbytes(t) -> int | None:
    n = t.shape.num_elements()
    return None if n is None else n * t.dtype.size


def _log_once(message: str) -> None:
    if message not in _LOGGED:
        _LOGGED.add(message)
        logging.info(message)
