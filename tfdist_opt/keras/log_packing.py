"""Keras's per-step log values reduced across workers in one collective.

Keras 3's `reduce_per_replica` (keras/src/backend/tensorflow/trainer.py)
maps `strategy.reduce("MEAN", value, axis=0)` over the logs of every
`train_step` / `test_step`, one value at a time. Under a multi-worker
strategy each call is one cross-worker collective, and each pays a
collective's fixed latency however small its tensor: a model compiled
with the loss and three metrics pays four of them a step. The latency
one collective costs on loopback is measured on the Benchmarks page.

`LogPacker` remembers the per-replica outputs of the strategy's last
`run`. When the first of them is reduced, every rank-0 floating value of
those outputs is reduced at once: one collective per dtype (stacked into a
vector, reduced, unstacked). The other values are answered from that
result. The numbers are those of the one-value-at-a-time path: the same
sums of the same per-replica values, divided by the same replica count;
with 2 workers bit for bit (one addition per element, in either order).

A value that is not among the last `run`'s outputs, not rank 0, not
floating, or reduced with another op than MEAN/SUM takes the ordinary path,
so custom training loops keep TF's semantics; they reduce in fewer
collectives too when they reduce several scalars of one `run`.
"""

from __future__ import annotations

import tensorflow as tf

_PACKABLE_OPS = ("MEAN", "SUM")


def op_name(reduce_op) -> str:
    """`reduce_op`'s name ("MEAN", "SUM") for a `ReduceOp` or a string."""
    return getattr(reduce_op, "name", None) or str(reduce_op).upper()


def _parts(value):
    """The per-replica tensors of `value`, or None if it cannot be packed.

    With one replica per worker `strategy.run` returns plain tensors, and
    Keras reduces those across workers just the same.
    """
    if isinstance(value, tf.types.experimental.distributed.PerReplica):
        parts = tuple(value.values)
    elif isinstance(value, tf.Tensor):
        parts = (value,)
    else:
        return None
    ok = all(p.shape.rank == 0 and p.dtype.is_floating for p in parts)
    return parts if ok else None


class LogPacker:
    """Reduces the scalar outputs of one `strategy.run` together.

    Args:
        reduce_fn: Callable. `reduce_fn(op_name, per_replica_vector)` reduces
            one PerReplica vector across all replicas (the strategy's own
            upstream `reduce` with `axis=None`).
    """

    def __init__(self, reduce_fn):
        self._reduce_fn = reduce_fn
        self._leaves = []  # the last run's packable outputs
        self._done = {}  # op name -> list of (leaf, reduced value)
        self.collectives = 0  # packed collectives issued (for tests)

    def remember(self, outputs) -> None:
        """Record the outputs of a `strategy.run`; forgets earlier ones."""
        self._leaves = [
            v for v in tf.nest.flatten(outputs, expand_composites=False) if _parts(v) is not None
        ]
        self._done = {}

    def lookup(self, reduce_op, value):
        """The packed reduction of `value`, or None if it does not qualify."""
        op = op_name(reduce_op)
        if op not in _PACKABLE_OPS or not any(value is leaf for leaf in self._leaves):
            return None
        if op not in self._done:
            self._done[op] = self._reduce_all(op)
        for leaf, reduced in self._done[op]:
            if leaf is value:
                return reduced
        return None

    def _reduce_all(self, op):
        groups = {}  # (dtype, kind, replicas) -> leaves
        for leaf in self._leaves:
            parts = _parts(leaf)
            groups.setdefault((parts[0].dtype, type(leaf), len(parts)), []).append(leaf)
        out = []
        for (_, kind, replicas), group in groups.items():
            if len(group) == 1:
                out.append((group[0], self._reduce_fn(op, group[0])))
                self.collectives += 1
                continue
            columns = [tf.stack([_parts(leaf)[r] for leaf in group]) for r in range(replicas)]
            is_per_replica = isinstance(group[0], tf.types.experimental.distributed.PerReplica)
            stacked = kind(tuple(columns)) if is_per_replica else columns[0]
            reduced = self._reduce_fn(op, stacked)
            self.collectives += 1
            out.extend(zip(group, tf.unstack(reduced, num=len(group))))
        return out
