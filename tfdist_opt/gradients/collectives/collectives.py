"""The collective layer: every collective the gradient path issues. TF binding.

One object per context, both built from the same two policies:

* `Codec`: the wire dtype. Float gradients wider than it are cast before
  the collective and back after it; fp16 is pre-divided by the replica
  count n (and multiplied back), so a sum cannot overflow (`precision`).
* `Packing`: how the tensors of one all-reduce are grouped into packs
  (`packing`: fixed, one pack, or DDP-style `"auto"`, refined by a measured
  autotune), and, with `streams > 0`, whether the dense tensors travel as
  pieces of `piece_bytes`, several in flight, instead (`piece_plan`).

`Collectives` (replica context; the hooked optimizer, ZeRO and a user
stage's `context.all_reduce_sum` call it):

* `all_reduce_sum(tensors)`: the SUM over replicas. The one place where
  sparse gradients (`tf.IndexedSlices`) are split off: they go through
  TF's own all-reduce (a gather), None passes through, the dense ones are
  encoded, packed (one `ReplicaContext.all_reduce` per pack, with
  `bytes_per_pack` at least the pack's size so TF does not split it again)
  or streamed (one `CollectiveReduceV2` per piece, piece k on ordering
  token k mod S), and decoded;
* `reduce_scatter(...)` and `all_gather(x)`: ZeRO stage 1's collectives.
  TF 2.21's CPU collectives have no reduce-scatter for RING
  (`CollectiveReduceScatterV2` is registered for NCCL only) but run
  `CollectiveAllToAllV2`: each replica lays its gradients out as `[n, s]`
  (row j is replica j's shard), runs one all-to-all per bucket and sums
  the n rows locally, in the wire dtype. The gather is one
  `CollectiveGatherV2` of equal-sized shards. Together: the bytes of one
  ring all-reduce.

`CrossReplicaCollectives` (`Collectives.cross_replica(distribution)`,
inside a `merge_call`: gradient accumulation and PowerSGD, whose
`tf.cond`s are legal only there) has `all_reduce_sum(local)` over
per-device values: one `extended.batch_reduce_to` per pack.

The collectives tfdist_opt issues itself (streams, ZeRO) need keys of
their own: the group key is derived from the replica count and the local
device names (the same on every worker), above TF's own group keys and
below `model_parallel.cross_worker`'s; instance keys count per (group,
replica) at trace time, so every replica and worker gives the same
collective the same key as long as they trace the same collectives in the
same order. Their ordering tokens (resources on each replica's device, as
TF's `CollectiveReplicaLauncher` uses) are small mirrored variables made
with the optimizer, outside its tracked state (never saved): without one,
tf.function's automatic control dependencies would chain replica 1's
collective after replica 0's, which waits for replica 1's.

All decisions are taken at trace time from static shapes, so every worker
traces the same collectives in the same order. Streamed sums are those of
one collective: with 2 workers bit for bit; with more the ring may add an
element's values in another order (float rounding only).
"""

from __future__ import annotations

import dataclasses
import threading
import zlib
from typing import Sequence

from absl import logging
import tensorflow as tf

from tfdist_opt.gradients.collectives import packing
from tfdist_opt.gradients.collectives import piece_plan
from tfdist_opt.gradients.collectives import precision
from tfdist_opt.gradients.binding import replica_slots

_GROUP_KEY_BASE = 5_000_000
_GROUP_KEY_RANGE = 1_000_000
_LOCK = threading.Lock()
_INSTANCE_KEYS: dict[tuple[int, int], int] = {}
_LOGGED: set[str] = set()


@dataclasses.dataclass(frozen=True)
class Wire:
    """How one tensor travels: its dtype, the wire dtype, the pre-division."""

    dtype: tf.DType
    wire: tf.DType
    factor: int


@dataclasses.dataclass(frozen=True)
class Codec:
    """The wire dtype of every collective of a step.

    Attributes:
        wire_dtype: str or None. `"float16"` or `"bfloat16"`: float tensors
            wider than it travel in it; None: every tensor as it is.
        predivide: bool. fp16 only: divide by the replica count before the
            cast and multiply back after the sum (no overflow). Defaults to
            `True`.
    """

    wire_dtype: str | None = None
    predivide: bool = True

    def wire_of(self, dtype: tf.DType) -> tf.DType:
        """The dtype a tensor of `dtype` travels in."""
        return tf.as_dtype(precision.compress_dtype(dtype.name, self.wire_dtype) or dtype)

    def encode(self, x: tf.Tensor, n: int) -> tuple[tf.Tensor, Wire]:
        """`x` in its wire dtype (fp16: / n first), and how to decode it."""
        dtype = x.dtype
        wire = self.wire_of(dtype)
        if wire == dtype:
            return x, Wire(dtype, dtype, 1)
        factor = precision.predivide_factor(wire.name, n, self.predivide)
        if factor != 1:
            x = x / tf.cast(factor, dtype)
        return tf.cast(x, wire), Wire(dtype, wire, factor)

    @staticmethod
    def decode(x: tf.Tensor, meta: Wire) -> tf.Tensor:
        """A summed wire value back in its own dtype (x n after fp16)."""
        if meta.wire == meta.dtype:
            return x
        out = tf.cast(x, meta.dtype)
        if meta.factor != 1:
            out = out * tf.cast(meta.factor, meta.dtype)
        return out


@dataclasses.dataclass(frozen=True)
class Packing:
    """How the tensors of one all-reduce are grouped into collectives.

    Attributes:
        bytes_per_pack: int or `"auto"` (`packing`). Defaults to `0` (one
            pack per dtype).
        tuned: int or None. With `"auto"`, the autotuned pack size for
            these shapes (`autotune`), which wins over the `"auto"` policy.
        streams: int. > 0: a replica-context all-reduce of dense tensors
            with static shapes travels as pieces instead, up to `streams`
            in flight. Defaults to `0`.
        piece_bytes: int. Bytes per piece on the wire. Defaults to `2 MiB`.
    """

    bytes_per_pack: int | str = 0
    tuned: int | None = None
    streams: int = 0
    piece_bytes: int = 2 << 20

    def policy(self, sizes: Sequence[int]) -> packing.PackPolicy:
        """The packing policy for these byte sizes."""
        if self.bytes_per_pack != "auto":
            return packing.fixed_policy(self.bytes_per_pack)
        if self.tuned is None:
            return packing.auto_pack_policy(sizes)
        # Reverse (backprop) order, like the "auto" policy: TF runs a
        # replica's collectives in issue order, so a first pack holding the
        # first layer (its gradient comes last) holds back every pack.
        return dataclasses.replace(
            packing.fixed_policy(self.tuned),
            reverse=True,
            reason=f"autotuned: {self.tuned} bytes, reverse (backprop) order",
        )

    def buckets(self, tensors: Sequence) -> list[list[int]]:
        """Index packs over `tensors` (as they travel), per dtype."""
        by_dtype: dict = {}
        for i, t in enumerate(tensors):
            by_dtype.setdefault(t.dtype, []).append(i)
        out: list[list[int]] = []
        for dtype, idx in by_dtype.items():
            sizes = [_nbytes(tensors[i]) for i in idx]
            if any(s is None for s in sizes):  # unknown shape: one pack, as TF
                out.append(idx)
                continue
            policy = self.policy(sizes)
            groups = packing.assign_buckets(sizes, policy)
            out.extend([idx[j] for j in g] for g in groups)
            _log_once(
                f"tfdist_opt gradients: {len(idx)} {dtype.name} tensors, "
                f"{sum(sizes)} bytes -> {len(groups)} pack(s): "
                f"{policy.describe()} ({policy.reason})"
            )
        return out


class Collectives:
    """The collectives of one optimizer (or one caller), replica context.

    Args:
        strategy: the `tf.distribute.Strategy`.
        codec: `Codec`. Defaults to no cast.
        packing: `Packing`. Defaults to one pack per dtype.
        ordered: bool. Make ordering tokens for collectives issued outside
            TF's launcher (ZeRO's; streams make theirs anyway). Call this
            where variables may be made (`build`, under the strategy's
            scope) when tokens are made. Defaults to `False`.
        tokens: the tokens of an earlier `Collectives` of the same
            optimizer, kept (a re-made codec or packing, `rebind`).
    """

    def __init__(
        self,
        strategy,
        codec: Codec = Codec(),
        packing: Packing = Packing(),
        ordered: bool = False,
        tokens: list | None = None,
    ):
        self.strategy = strategy
        self.n = strategy.num_replicas_in_sync
        self.codec = codec
        self.packing = packing
        self.group = group_key(strategy)
        self.tokens = tokens
        if tokens is None and self.n > 1 and (packing.streams or ordered):
            with replica_slots.creation_scope(strategy):
                self.tokens = [
                    tf.Variable(0.0, trainable=False, name=f"tfdist_ordering_token_{i}")
                    for i in range(max(1, packing.streams))
                ]

    def all_reduce_sum(self, tensors: Sequence) -> list:
        """SUM over replicas of each of `tensors` (replica context).

        Args:
            tensors: dense tensors, `tf.IndexedSlices` or None (kept).

        Returns:
            A list like `tensors`, each summed over every replica, in its
            own dtype.
        """
        ctx = tf.distribute.get_replica_context()
        out = list(tensors)
        dense, sparse = split(tensors)
        if sparse:
            for i, r in zip(sparse, ctx.all_reduce("SUM", [tensors[i] for i in sparse])):
                out[i] = r
        values = [tf.convert_to_tensor(tensors[i]) for i in dense]
        if not values:
            return out
        if self.packing.streams and self.tokens and all(_nbytes(v) is not None for v in values):
            reduced = self._streamed(values)
        else:
            sent = [self.codec.encode(v, self.n) for v in values]
            wire = [s for s, _ in sent]
            reduced = [None] * len(values)
            for bucket in self.packing.buckets(wire):
                pack = [wire[j] for j in bucket]
                for j, r in zip(bucket, ctx.all_reduce("SUM", pack, options=_one_pack(pack))):
                    reduced[j] = self.codec.decode(r, sent[j][1])
        for i, r in zip(dense, reduced):
            out[i] = r
        return out

    def _streamed(self, tensors: list) -> list:
        """The dense `tensors` summed piece by piece (`piece_plan`).

        Per dtype, the tensors are laid end to end in backprop order and cut
        into pieces of `piece_bytes` on the wire: a piece's collective needs
        only the gradients it covers, so the first pieces start while the
        backward pass computes the rest. Each piece is encoded and decoded
        on its own, so later pieces' casts overlap earlier pieces' transfer.
        """
        replica = static_replica_id(tf.distribute.get_replica_context(), "collective_streams")
        out: list = list(tensors)
        groups: dict = {}
        for i, t in enumerate(tensors):
            groups.setdefault(t.dtype, []).append(i)
        piece = 0
        for dtype, idx in groups.items():
            itemsize = self.codec.wire_of(dtype).size
            flat = [tf.reshape(tensors[i], [-1]) for i in idx]
            sizes = [int(tensors[i].shape.num_elements()) for i in idx]
            order = list(reversed(range(len(idx))))  # backprop order
            plan = piece_plan.plan_pieces(
                sizes, order, max(1, self.packing.piece_bytes // itemsize)
            )
            chunks: list[list[tf.Tensor]] = [[] for _ in idx]
            for segments in plan:
                ins = [
                    flat[s.tensor]
                    if s.end - s.start == sizes[s.tensor]
                    else flat[s.tensor][s.start : s.end]
                    for s in segments
                ]
                wire, meta = self.codec.encode(
                    ins[0] if len(ins) == 1 else tf.concat(ins, 0), self.n
                )
                summed = self.codec.decode(
                    tf.raw_ops.CollectiveReduceV2(
                        input=wire,
                        group_size=self.n,
                        group_key=self.group,
                        instance_key=next_instance_key(self.group, replica),
                        ordering_token=[self.tokens[piece % len(self.tokens)].handle],
                        merge_op="Add",
                        final_op="Id",
                        communication_hint="ring",
                    ),
                    meta,
                )
                piece += 1
                parts = (
                    [summed]
                    if len(segments) == 1
                    else tf.split(summed, [s.end - s.start for s in segments])
                )
                for s, part in zip(segments, parts):
                    chunks[s.tensor].append(part)
            for j, i in enumerate(idx):
                if chunks[j]:  # an empty tensor is its own sum
                    joined = chunks[j][0] if len(chunks[j]) == 1 else tf.concat(chunks[j], 0)
                    out[i] = tf.reshape(joined, tensors[i].shape)
        return out

    def reduce_scatter(self, grads, shard_sizes, max_bytes: int, after=()) -> list[tf.Tensor]:
        """This replica's shard of each summed gradient (replica context).

        Args:
            grads: dense tensors or `tf.IndexedSlices` (densified), one per
                variable.
            shard_sizes: each variable's shard size; replica r's shard is
                flat elements `[r * s, (r + 1) * s)`, zero-padded past the end.
            max_bytes: bound on one all-to-all's bytes
                (`packing.scatter_buckets`; a gradient larger than that is
                cut into column ranges of its `[n, s]` layout,
                `packing.column_pieces`). Each bucket's input is built after
                the previous bucket's sum, so about one bucket of collective
                buffers is alive at once.
            after: ops the first bucket's input waits for.

        Returns:
            A list of flat `[s]` tensors in the gradients' dtypes: the sum
            over replicas of this replica's shard (elementwise, so a sum
            over column ranges is the sum over the whole, bit for bit).
        """
        n = self.n
        replica = static_replica_id(tf.distribute.get_replica_context(), "shard_optimizer_state")
        grads = [tf.convert_to_tensor(g) for g in grads]
        out: list = [None] * len(grads)
        plan = packing.scatter_buckets(
            [g.dtype.name for g in grads],
            [int(g.shape.num_elements()) * g.dtype.size for g in grads],
            max_bytes,
        )
        done = list(after)
        for bucket in plan:
            # Cast, pad and concatenate only once the previous bucket is summed.
            with tf.control_dependencies(done):
                rows, metas = [], []
                for j in bucket:
                    wire, meta = self.codec.encode(grads[j], n)
                    flat = tf.reshape(wire, [-1])
                    pad = n * shard_sizes[j] - int(flat.shape.num_elements())
                    if pad:
                        flat = tf.pad(flat, [[0, pad]])
                    rows.append(tf.reshape(flat, [n, shard_sizes[j]]))
                    metas.append(meta)
            if len(bucket) == 1:
                cols = packing.column_pieces(
                    shard_sizes[bucket[0]], n, rows[0].dtype.size, max_bytes
                )
                parts = []
                for lo, hi in cols:
                    with tf.control_dependencies(done):
                        x = tf.identity(rows[0]) if len(cols) == 1 else rows[0][:, lo:hi]
                    got = self._own("CollectiveAllToAllV2", x, replica)
                    part = tf.add_n(tf.unstack(got, num=n))
                    done = [part]
                    parts.append(part)
                summed = parts[0] if len(parts) == 1 else tf.concat(parts, axis=0)
                out[bucket[0]] = self.codec.decode(summed, metas[0])
                continue
            with tf.control_dependencies(done):
                x = tf.concat(rows, axis=1)
            summed = tf.add_n(tf.unstack(self._own("CollectiveAllToAllV2", x, replica), num=n))
            done = [summed]
            for j, part, meta in zip(
                bucket, tf.split(summed, [shard_sizes[j] for j in bucket]), metas
            ):
                out[j] = self.codec.decode(part, meta)
        return out

    def all_gather(self, x: tf.Tensor) -> tf.Tensor:
        """`x` [k] -> [n * k], replica j's `x` at [j * k, (j + 1) * k).

        Every replica's `x` has the same size (ZeRO's shards by
        construction), so this is one collective, with no lengths exchange
        and no padding (`ReplicaContext.all_gather` runs two).
        """
        replica = static_replica_id(tf.distribute.get_replica_context(), "shard_optimizer_state")
        return self._own("CollectiveGatherV2", x, replica)

    def _own(self, op: str, x, replica: int):
        return getattr(tf.raw_ops, op)(
            input=x,
            group_size=self.n,
            group_key=self.group,
            instance_key=next_instance_key(self.group, replica),
            ordering_token=[self.tokens[0].handle],
            communication_hint="auto",
        )

    def cross_replica(self, distribution) -> "CrossReplicaCollectives":
        """The same codec and packing, inside a `merge_call`."""
        return CrossReplicaCollectives(distribution, self.codec, self.packing)


class CrossReplicaCollectives:
    """The all-reduce of per-device values in a cross-replica context.

    Args:
        distribution: the strategy, as a `merge_call` function gets it.
        codec: `Codec`.
        packing: `Packing` (its `streams` do not apply here).
    """

    def __init__(self, distribution, codec: Codec, packing: Packing):
        self.distribution = distribution
        self.devices = distribution.extended.worker_devices
        self.codec = codec
        self.packing = packing

    def all_reduce_sum(self, local: Sequence[Sequence], one_pack: bool = False) -> list[list]:
        """SUM over replicas of dense per-device values.

        Args:
            local: one entry per tensor: its value on each local device
                (`local_results`).
            one_pack: bool. One collective per dtype (PowerSGD's factors),
                whatever the packing. Defaults to `False`.

        Returns:
            One list per tensor: the sum, decoded, on each local device.
        """
        dist, n = self.distribution, self.distribution.num_replicas_in_sync
        wire, metas = [], []
        for values in local:
            per_dev = []
            for dev, v in zip(self.devices, values):
                with tf.device(dev):
                    sent, meta = self.codec.encode(v, n)
                per_dev.append(sent)
            metas.append(meta)
            wire.append(per_replica(dist, per_dev))
        firsts = [dist.experimental_local_results(w)[0] for w in wire]
        buckets = (Packing() if one_pack else self.packing).buckets(firsts)
        out: list = [None] * len(wire)
        for bucket in buckets:
            reduced = dist.extended.batch_reduce_to(
                tf.distribute.ReduceOp.SUM,
                [(wire[j], wire[j]) for j in bucket],
                options=_one_pack([firsts[j] for j in bucket]),
            )
            for j, r in zip(bucket, reduced):
                out[j] = []
                for dev, v in zip(self.devices, dist.experimental_local_results(r)):
                    with tf.device(dev):
                        out[j].append(self.codec.decode(v, metas[j]))
        return out


def split(tensors: Sequence) -> tuple[list[int], list[int]]:
    """(dense indices, sparse indices) of `tensors`; None is in neither."""
    dense, sparse = [], []
    for i, t in enumerate(tensors):
        if isinstance(t, tf.IndexedSlices):
            sparse.append(i)
        elif t is not None:
            dense.append(i)
    return dense, sparse


def local_results(distribution, value) -> tuple:
    """`value`'s component on each local device, one per device.

    A tensor every replica passed as the same object (a gradient made
    outside `strategy.run`, as `benchmarks/allreduce.py` does) reaches
    `merge_call` as that one tensor, not a per-replica value: it is every
    device's component.
    """
    nd = len(distribution.extended.worker_devices)
    out = tuple(distribution.experimental_local_results(value))
    return out * nd if len(out) == 1 and nd > 1 else out


def per_replica(distribution, per_device: list):
    """A distributed value from one tensor per local device."""
    if len(per_device) == 1 and distribution.num_replicas_in_sync == 1:
        return per_device[0]
    nd = len(per_device)
    return distribution.experimental_distribute_values_from_function(
        lambda ctx: per_device[ctx.replica_id_in_sync_group % nd]
    )


def group_key(strategy) -> int:
    """The collective group key of `strategy`'s replicas (same on every worker)."""
    names = []
    for d in strategy.extended.worker_devices:
        spec = tf.DeviceSpec.from_string(d)
        names.append(f"{spec.device_type}:{spec.device_index}")
    desc = f"tfdist_opt.zero|{strategy.num_replicas_in_sync}|{','.join(names)}"
    return _GROUP_KEY_BASE + zlib.crc32(desc.encode()) % _GROUP_KEY_RANGE


def next_instance_key(group: int, replica: int) -> int:
    """A new instance key for `replica`'s next collective in `group`."""
    with _LOCK:
        key = _INSTANCE_KEYS.get((group, replica), 0) + 1
        _INSTANCE_KEYS[(group, replica)] = key
        return key


def static_replica_id(ctx, setting: str) -> int:
    """The replica id of replica context `ctx` as a Python int.

    Args:
        ctx: a `tf.distribute.ReplicaContext`.
        setting: str. What needs it, for the error.
    """
    r = tf.get_static_value(ctx.replica_id_in_sync_group)
    if r is None:
        raise RuntimeError(
            f"tfdist_opt {setting} needs a static replica id (a tf.distribute replica context)."
        )
    return int(r)


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
