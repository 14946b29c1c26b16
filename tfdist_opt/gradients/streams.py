"""Streamed all-reduce: a step's gradients as pieces, several in flight.

TF's multi-worker all-reduce runs a step's gradients as one collective per
pack, each waiting for the previous one (they share the launcher's
ordering token), and the whole pack waits for the last gradient of the
backward pass. Here, with `collective_streams=S` (`StrategyConfig`):

* the gradients of each dtype are laid end to end in backprop order and cut
  into pieces of `collective_piece_bytes` (`piece_plan`): a piece's
  collective needs only the gradients it covers, so the first pieces start
  while the backward pass still computes the rest;
* each piece is one `CollectiveReduceV2` (TF's RING over gRPC on CPU), with
  piece k on ordering token k mod S: up to S collectives in flight, each
  stream in issue order (every worker traces the same pieces in the same
  order, so every stream matches piece for piece, whatever the timing);
* the summed pieces are split and reshaped back: the sum of the same
  values as one collective's; with 2 workers bit for bit (one addition per
  element), with more the ring may add an element's values in another
  order than one large collective would (float rounding only).

Why: on a link-bound step one large collective leaves the link idle
between its request/response rounds; pieces of a few MB, two at once, keep
it busy (figures on the Benchmarks page). NCCL keeps TF's path: concurrent
NCCL collectives must be ordered by their launcher.

Keys come from `collective_keys`; the ordering tokens are small mirrored
variables made when the optimizer is built, outside its tracked state
(never saved).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

import tensorflow as tf

from tfdist_opt.gradients import collective_keys
from tfdist_opt.gradients import replica_slots
from tfdist_opt.gradients import piece_plan


class Streams:
    """One optimizer's streamed collectives: group, tokens, piece size.

    Made by the optimizer's `build` (cross-replica, or inside the first
    step's replica context when Keras builds it lazily: the tokens go
    through `replica_slots.creation_scope`, as optimizer state does).

    Args:
        strategy: the `tf.distribute.Strategy`.
        streams: int >= 1. Collectives in flight at once (ordering tokens).
        piece_bytes: int >= 1. Bytes per piece.
    """

    def __init__(self, strategy, streams: int, piece_bytes: int):
        self.n = strategy.num_replicas_in_sync
        self.group = collective_keys.group_key(strategy)
        self.piece_bytes = piece_bytes
        with replica_slots.creation_scope(strategy):
            self.tokens = [
                tf.Variable(0.0, trainable=False, name=f"tfdist_stream_token_{i}")
                for i in range(streams)
            ]

    def all_reduce(self, x: tf.Tensor, replica: int, piece: int) -> tf.Tensor:
        """SUM over replicas of flat `x`, on stream `piece` mod S."""
        return tf.raw_ops.CollectiveReduceV2(
            input=x,
            group_size=self.n,
            group_key=self.group,
            instance_key=collective_keys.next_instance_key(self.group, replica),
            ordering_token=[self.tokens[piece % len(self.tokens)].handle],
            merge_op="Add",
            final_op="Id",
            communication_hint="ring",
        )


@dataclasses.dataclass(frozen=True)
class Codec:
    """How pieces travel: cast (and pre-divide) each piece, not each tensor.

    Casting piece by piece lets the cast of later pieces run while earlier
    ones are on the wire (a whole-tensor cast must finish before the
    tensor's first piece can go), and the cast back likewise.

    Attributes:
        encode: `x -> (wire, meta)` (`allreduce.compress`).
        decode: `(summed, meta) -> x` (`allreduce.decompress`).
        wire_size: `dtype -> int`, bytes per element on the wire (pieces
            are `piece_bytes` on the wire).
    """

    encode: Callable
    decode: Callable
    wire_size: Callable


def all_reduce_sum(
    tensors: Sequence[tf.Tensor],
    streams: Streams,
    codec: Codec | None = None,
) -> list[tf.Tensor]:
    """SUM over replicas of each dense tensor (replica context), in pieces.

    Args:
        tensors: dense tensors with static shapes.
        streams: the optimizer's `Streams`.
        codec: `Codec` or None. Applied to every piece (None: the tensors
            travel as they are).

    Returns:
        A list like `tensors`: each summed over every replica.
    """
    replica = collective_keys.static_replica_id(
        tf.distribute.get_replica_context(), "collective_streams"
    )
    out: list = list(tensors)
    groups: dict = {}
    for i, t in enumerate(tensors):
        groups.setdefault(t.dtype, []).append(i)
    piece = 0
    for dtype, idx in groups.items():
        itemsize = codec.wire_size(dtype) if codec else dtype.size
        flat = [tf.reshape(tensors[i], [-1]) for i in idx]
        sizes = [int(tensors[i].shape.num_elements()) for i in idx]
        order = list(reversed(range(len(idx))))  # backprop order
        plan = piece_plan.plan_pieces(sizes, order, max(1, streams.piece_bytes // itemsize))
        chunks: list[list[tf.Tensor]] = [[] for _ in idx]
        for segments in plan:
            ins = [
                flat[s.tensor]
                if s.end - s.start == sizes[s.tensor]
                else flat[s.tensor][s.start : s.end]
                for s in segments
            ]
            x = ins[0] if len(ins) == 1 else tf.concat(ins, 0)
            if codec:
                wire, meta = codec.encode(x)
                summed = codec.decode(streams.all_reduce(wire, replica, piece), meta)
            else:
                summed = streams.all_reduce(x, replica, piece)
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
