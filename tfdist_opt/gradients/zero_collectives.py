"""ZeRO stage 1's two collectives: reduce-scatter and gather, TF binding.

TF 2.21's CPU collectives have no reduce-scatter for RING
(`CollectiveReduceScatterV2` fails with "CollectiveRegistry::Lookup did not
find collective implementation undef"; TF registers it for NCCL only), but
they do run `CollectiveAllToAllV2` (common_runtime/all_to_all.cc) under
multi-worker RING and between the virtual CPUs of one process. So:

* `reduce_scatter`: each replica lays its gradients out as `[n, s]` (row j
  is replica j's shard), runs one all-to-all per bucket (it receives row r
  of every replica) and sums the n rows locally, in the wire dtype (bf16 /
  fp16 compression as in `allreduce`). Each replica sends (n-1)/n of the
  gradient bytes once, half of a ring all-reduce.
* `gather`: one `CollectiveGatherV2` per bucket of updated shards (equal
  sizes on every replica by construction, so no lengths exchange and no
  padding, unlike `ReplicaContext.all_gather`'s two collectives): the other
  (n-1)/n. Together: the bytes of one ring all-reduce.

The ops are ordered per device by an ordering token (a resource on the
replica's device, as TF's own `CollectiveReplicaLauncher` does): without
one, tf.function's automatic control dependencies chain every stateful op
without a resource input in program order, so with several local replicas
(`MirroredStrategy` on virtual CPUs) replica 1's collective waits for
replica 0's, which waits for replica 1's (it never returned here).

Keys: `collective_keys` (one group per device set, instance keys counted
per replica at trace time). Group ranks follow the replica ids (TF's own
`all_gather` relies on the same order).
"""

from __future__ import annotations

import tensorflow as tf

from tfdist_opt.gradients import allreduce
from tfdist_opt.gradients import collective_keys
from tfdist_opt.gradients import replica_slots
from tfdist_opt.gradients import zero_plan


class Collectives:
    """One optimizer's collectives: group, replica count, ordering tokens.

    Made in the cross-replica context (`build`, under the strategy's scope):
    the ordering token is a small mirrored variable, kept out of the
    optimizer's tracked state (it is never saved).

    Args:
        strategy: the `tf.distribute.Strategy`.
    """

    def __init__(self, strategy):
        self.n = strategy.num_replicas_in_sync
        self.group = collective_keys.group_key(strategy)
        self.token = None
        if self.n > 1:
            with replica_slots.creation_scope(strategy):
                self.token = tf.Variable(0.0, trainable=False, name="tfdist_zero_ordering_token")

    def _kw(self, x, replica):
        return dict(
            input=x,
            group_size=self.n,
            group_key=self.group,
            instance_key=collective_keys.next_instance_key(self.group, replica),
            ordering_token=[self.token.handle],
            communication_hint="auto",
        )

    def all_to_all(self, x, replica):
        """`x` [n, k] -> [n, k], row j from replica j's row `replica`."""
        return tf.raw_ops.CollectiveAllToAllV2(**self._kw(x, replica))

    def gather(self, x, replica):
        """`x` [k] -> [n * k], replica j's `x` at [j * k, (j + 1) * k)."""
        return tf.raw_ops.CollectiveGatherV2(**self._kw(x, replica))


def reduce_scatter(
    grads, shard_sizes, replica, collectives, options, max_bytes, after=()
) -> list[tf.Tensor]:
    """This replica's shard of each summed gradient (replica context).

    Args:
        grads: dense tensors or `tf.IndexedSlices` (densified), one per
            variable.
        shard_sizes: each variable's shard size; replica r's shard is flat
            elements `[r * s, (r + 1) * s)`, zero-padded past the end.
        replica: this replica's id.
        collectives: the optimizer's `Collectives`.
        options: `GradientOptions` (compression).
        max_bytes: bound on one all-to-all's bytes
            (`zero_plan.scatter_buckets`; a gradient larger than that is
            cut into column ranges of its `[n, s]` layout,
            `zero_plan.column_pieces`). Each bucket's input is built
            after the previous bucket's sum, so at most about one bucket of
            collective buffers is alive at once.
        after: ops the first bucket's input waits for.

    Returns:
        A list of flat `[s]` tensors in the gradients' dtypes: the sum over
        replicas of this replica's shard (elementwise, so a sum over column
        ranges is the sum over the whole, bit for bit).
    """
    n = collectives.n
    grads = [tf.convert_to_tensor(g) for g in grads]
    out: list = [None] * len(grads)
    plan = zero_plan.scatter_buckets(
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
                wire, meta = allreduce.compress(grads[j], options, n)
                flat = tf.reshape(wire, [-1])
                pad = n * shard_sizes[j] - int(flat.shape.num_elements())
                if pad:
                    flat = tf.pad(flat, [[0, pad]])
                rows.append(tf.reshape(flat, [n, shard_sizes[j]]))
                metas.append(meta)
        if len(bucket) == 1:
            cols = zero_plan.column_pieces(shard_sizes[bucket[0]], n, rows[0].dtype.size, max_bytes)
            parts = []
            for lo, hi in cols:
                with tf.control_dependencies(done):
                    x = tf.identity(rows[0]) if len(cols) == 1 else rows[0][:, lo:hi]
                got = collectives.all_to_all(x, replica)
                part = tf.add_n(tf.unstack(got, num=n))
                done = [part]
                parts.append(part)
            summed = parts[0] if len(parts) == 1 else tf.concat(parts, axis=0)
            out[bucket[0]] = allreduce.decompress(summed, metas[0])
            continue
        with tf.control_dependencies(done):
            x = tf.concat(rows, axis=1)
        got = collectives.all_to_all(x, replica)
        summed = tf.add_n(tf.unstack(got, num=n))
        done = [summed]
        parts = tf.split(summed, [shard_sizes[j] for j in bucket])
        for j, part, meta in zip(bucket, parts, metas):
            out[j] = allreduce.decompress(part, meta)
    return out
