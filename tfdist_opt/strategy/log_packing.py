"""Keras's per-step log values reduced across workers in one collective.

Keras 3's `reduce_per_replica` (keras/src/backend/tensorflow/trainer.py)
maps `strategy.reduce("MEAN", value, axis=0)` over the logs of every
`train_step` / `test_step`, one value at a time. Under a multi-worker
strategy each call is one cross-worker collective, and each pays a
collective's fixed latency however small its tensor: a model compiled
with the loss and three metrics pays four of them a step. What one
collective fewer a step buys is measured on the Benchmarks page
(`--compare=fold`).

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

`preset` takes a value whose cross-replica SUM a gradient collective
already carried (`tfdist_opt.gradients.log_fold`): its MEAN is then that
sum divided by the replica count, as upstream divides, with no collective.
"""

from __future__ import annotations

import tensorflow as tf

_PACKABLE_OPS = ("MEAN", "SUM")


def _op_name(reduce_op) -> str:
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


def _key(t):
    try:
        return (id(t.graph), t.name)
    except (AttributeError, ValueError):  # eager tensors have no name
        return (None, id(t))


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
        self._presets = {}  # tensor key -> (SUM over replicas, replica count)
        self.collectives = 0  # packed collectives issued (for tests)
        self.folded = 0  # values answered from a gradient collective (tests)

    def clear_presets(self) -> None:
        """Forget the sums of an earlier `run` (called as a `run` starts)."""
        self._presets = {}

    def preset(self, value, total, replicas: int) -> None:
        """`value`'s SUM over all `replicas` replicas is `total` (see module doc)."""
        self._presets[_key(value)] = (total, replicas)

    def _preset_for(self, reduce_op, value):
        if not self._presets or not isinstance(value, tf.Tensor):
            return None
        op = _op_name(reduce_op)
        if op not in _PACKABLE_OPS:
            return None
        v = value
        while True:
            hit = self._presets.get(_key(v))
            if hit is not None:
                total, replicas = hit
                self.folded += 1
                # Upstream's MEAN: `v / group_size` (CollectiveAllReduce).
                return total / replicas if op == "MEAN" else tf.identity(total)
            if getattr(v, "op", None) is None or v.op.type != "Identity":
                return None
            v = v.op.inputs[0]

    def remember(self, outputs) -> None:
        """Record the outputs of a `strategy.run`; forgets earlier ones."""
        self._leaves = [
            v
            for v in tf.nest.flatten(outputs, expand_composites=False)
            if _parts(v) is not None and self._preset_for_any(v) is None
        ]
        self._done = {}

    def _preset_for_any(self, value):
        # A folded value never joins the packed collective.
        if not self._presets:
            return None
        v = value
        while isinstance(v, tf.Tensor):
            if _key(v) in self._presets:
                return v
            # An eager tensor has no `op` (`getattr` answers None for it).
            if getattr(v, "op", None) is None or v.op.type != "Identity":
                return None
            v = v.op.inputs[0]
        return None

    def lookup(self, reduce_op, value):
        """The packed reduction of `value`, or None if it does not qualify."""
        folded = self._preset_for(reduce_op, value)
        if folded is not None:
            return folded
        op = _op_name(reduce_op)
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
