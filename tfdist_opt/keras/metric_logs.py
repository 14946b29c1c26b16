"""Each batch's metric logs computed from every replica's metric state.

Keras 3's TensorFlow trainer computes a step's logs inside each replica
(`get_metrics_result()`, reading the replica's own part of every metric
variable) and then averages the replicas' values (`reduce_per_replica`).
That equals one device's value only when the replicas' counts are equal: a
weighted mean (`compile(weighted_metrics=...)`, `sample_weight`) was logged
per batch as the mean of the replicas' weighted means (0.691 where one
device logs 0.720), and any metric whose replicas count differently. Keras's
epoch-end logs read the variables outside the replicas (summed over them)
and were right.

`synced_step` wraps a train or test step: after it, within the replica,
the metric variables' parts are all-reduced (one collective per dtype, the
variables packed into one vector) with each variable's own aggregation
(SUM, MEAN, ONLY_FIRST_REPLICA), and the logs are `get_metrics_result()`
computed from those totals (`keras.StatelessScope` maps each variable to
its total). Every replica then logs the one-device value, and Keras's mean
of equal values keeps it. The step's logs are replaced under Keras's own
epoch-end rule (`_get_metrics_result_or_logs`): only when their keys are
the metrics' result keys, so a custom `train_step` returning other values
keeps them. The wrapper runs outside a step compiled per replica with XLA
(`xla_steps`), so the compiled step holds no collective.
"""

from __future__ import annotations

_AGGREGATIONS = ("sum", "mean", "only_first_replica")
# The name of the op that marks a value equal on every replica.
_REPLICA_EQUAL = "tfdist_replica_equal"


def synced_step(model, step):
    """`step` whose metric logs are computed from every replica's metric state.

    Args:
        model: the Keras model whose step it is.
        step: Callable. The replica's train or test step (`data -> logs`).

    Returns:
        A callable of the same signature.
    """

    def step_with_synced_logs(data):
        return synced_logs(model, step(data))

    return step_with_synced_logs


def synced_logs(model, logs):
    """`logs`, or the metrics' results over all replicas when `logs` are those results."""
    import keras
    import tensorflow as tf

    ctx = tf.distribute.get_replica_context()
    if ctx is None or ctx.num_replicas_in_sync <= 1 or not isinstance(logs, dict):
        return logs
    variables = _synced_variables(model)
    if not variables:
        return logs
    totals = _all_reduce(ctx, variables)
    with keras.StatelessScope(state_mapping=list(zip(variables, totals))):
        results = model.get_metrics_result()
        if set(results) != set(logs):
            return logs

        # A `result()` may return its variable, or a dict of them: read
        # inside the scope. Each value is marked as equal on every replica
        # (`replica_equal`).
        def read(value):
            if isinstance(value, keras.Variable):
                value = keras.ops.convert_to_tensor(value)
            return tf.identity(value, name=_REPLICA_EQUAL)

        return {k: tf.nest.map_structure(read, v) for k, v in results.items()}


def replica_equal(value) -> bool:
    """True for a log value `synced_logs` made in a traced step: every replica,
    on every worker, holds the same number, so its mean over the replicas is
    any replica's value and needs no collective."""
    import tensorflow as tf

    parts = value.values if isinstance(value, tf.distribute.DistributedValues) else (value,)
    if tf.executing_eagerly():
        return False  # no op names to read: the ordinary reduce
    for part in parts:
        op = getattr(part, "op", None) if isinstance(part, tf.Tensor) else None
        if op is None or not op.name.rsplit("/", 1)[-1].startswith(_REPLICA_EQUAL):
            return False
    return True


def _synced_variables(model):
    """The model's metric variables held per replica, each once, in order."""
    import tensorflow as tf

    seen, out = set(), []
    for metric in model.metrics:
        for variable in metric.variables:
            if id(variable) in seen or variable.aggregation not in _AGGREGATIONS:
                continue
            seen.add(id(variable))
            if isinstance(variable.value, tf.distribute.DistributedValues):
                out.append(variable)
    return out


def _all_reduce(ctx, variables):
    """Each variable's total over the replicas, by its aggregation."""
    import tensorflow as tf

    first = tf.equal(ctx.replica_id_in_sync_group, 0)
    parts = []
    for variable in variables:
        local = tf.convert_to_tensor(variable.value)
        if variable.aggregation == "only_first_replica":
            local = tf.where(first, local, tf.zeros_like(local))
        parts.append(local)
    groups = {}
    for i, part in enumerate(parts):
        groups.setdefault(part.dtype, []).append(i)
    totals = [None] * len(parts)
    for indices in groups.values():
        flat = tf.concat([tf.reshape(parts[i], [-1]) for i in indices], axis=0)
        summed = ctx.all_reduce(tf.distribute.ReduceOp.SUM, flat)
        sizes = [parts[i].shape.num_elements() for i in indices]
        for i, piece in zip(indices, tf.split(summed, sizes)):
            total = tf.reshape(piece, parts[i].shape)
            if variables[i].aggregation == "mean":
                total = total / tf.cast(ctx.num_replicas_in_sync, total.dtype)
            totals[i] = total
    return totals
