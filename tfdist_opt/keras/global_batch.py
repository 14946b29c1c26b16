"""`fit` refuses a `tf.data` global batch the replicas do not divide.

Under `tf.distribute`, the batch a `tf.data.Dataset` given to `fit` yields is
the global batch: TF splits each one over the `num_replicas_in_sync`
replicas (all workers together). A batch the replicas do not divide is
split unevenly (8 over 3 replicas: 3, 3, 2), and Keras 3 scales each
replica's mean loss by `1 / num_replicas_in_sync`, so the examples of a
step are weighted unequally: the trajectory differs from one device's,
silently. That happens first when a run resumes at another size (Ray
elastic, `tfdist-opt launch --ray -n MIN:MAX`) with a batch the new size does not
divide. So `fit` (`check_fit_input`, called by `keras_steps.KerasSteps.fit`
before Keras builds anything) raises the `ValueError` of
`tfdist_opt.data.per_replica_batch_size`, naming the global batch, the
replica count and the worker count, before step 1 (with `grad_accum`,
the batch contract's `ValueError`, `tfdist_opt.gradients.accumulation.contract`, which
states the same rule for the micro-batch).

How the batch is found, without reading input:

- a static batch dimension (`batch(B, drop_remainder=True)`): the
  dataset's `element_spec`;
- otherwise TF's own answer, the one `experimental_distribute_dataset`
  rebatches by (`tf.raw_ops.ComputeBatchSize`, which walks the dataset's
  graph up to its last `batch` / `padded_batch` and returns -1 when a
  transformation after it may change the batch, e.g. a `map`). It counts
  full batches only, so the last, partial batch of an epoch
  (`drop_remainder=False`) is never refused: TF splits it its own way
  (7 over 3 replicas: 3, 3, 1; 4: 2, 2, 0), a replica possibly getting an
  empty batch, as `experimental_distribute_dataset` documents, so that
  last step weighs its examples unequally; with `drop_remainder=True`
  every step has exactly the global batch.
- unknown (-1; a `map` after the `batch`, a generator, no `batch`): not
  checked, logged once. A `tf.distribute.DistributedDataset` (from
  `distribute_datasets_from_function`, where the user batches per replica,
  or from `experimental_distribute_dataset`), a generator or a
  `keras.utils.PyDataset` are not checked either.

Only `fit` checks: `evaluate` and `predict` give the same results for an
uneven split (Keras weights each replica's loss by its batch size in the
loss tracker, metrics sum over replicas, and `predict` concatenates).
"""

from __future__ import annotations

from tfdist_opt import _logging
from tfdist_opt.data import shard_math
from tfdist_opt.gradients.accumulation import contract

# TensorFlow is imported where used: `keras_steps` imports this module, and
# importing tfdist_opt does not load TensorFlow.


def dataset_global_batch(dataset) -> int | None:
    """The batch `dataset` yields per step, full batches only, or None.

    Reads the dataset's structure only; no element is produced.

    Args:
        dataset: `tf.data.Dataset`.

    Returns:
        The static batch dimension when every component has the same one,
        else TF's `ComputeBatchSize` of the dataset's graph; None when
        neither knows it.

    Example:
        >>> dataset_global_batch(tf.data.Dataset.range(20).batch(8))
        8
    """
    import tensorflow as tf

    dims = []
    for spec in tf.nest.flatten(dataset.element_spec):
        shape = getattr(spec, "shape", None)
        if shape is None or shape.rank is None or shape.rank == 0:
            return None  # no batch dimension to split (or unknown rank)
        dims.append(shape[0])
    if dims and all(d is not None for d in dims):
        return dims[0] if len(set(dims)) == 1 else None
    try:
        size = int(
            tf.raw_ops.ComputeBatchSize(input_dataset=tf.data.experimental.to_variant(dataset))
        )
    except (tf.errors.OpError, TypeError, ValueError):
        return None
    return size if size > 0 else None


def _num_workers(strategy) -> int:
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None:
        return 1
    cluster = resolver.cluster_spec().as_dict()
    return max(1, len(cluster.get("chief", ())) + len(cluster.get("worker", ())))


def _local_replicas(strategy) -> int:
    """This worker's replicas (its devices: one per GPU, or its CPU replicas)."""
    return max(1, len(strategy.extended.worker_devices))


def per_worker_batch(strategy, dataset) -> int | None:
    """The per-worker batch of a dataset each worker feeds its own share of, or None.

    A `tf.data` dataset with auto-sharding OFF given to several workers is
    per-worker data (Ray Train's `to_tf` shards, a dataset each worker
    reads its own files into): TF's semantics make each worker's batch its
    share of the global batch, `batch x workers`, split over the worker's
    own replicas (`per_worker_dataset_fn`). Upstream
    `experimental_distribute_dataset` instead splits each worker's batch
    over every replica of the cluster and keeps this worker's part, so a
    worker trains on 1/workers of its examples, silently.

    Returns:
        The per-worker batch; -1 when it is not known before step 1 (a
        generator, a `map` after `batch`); None for any other dataset or a
        single worker, which keeps the upstream path.
    """
    import tensorflow as tf

    if not isinstance(dataset, tf.data.Dataset):
        return None
    workers = _num_workers(strategy)
    if workers <= 1:
        return None
    policy = dataset.options().experimental_distribute.auto_shard_policy
    if policy != tf.data.experimental.AutoShardPolicy.OFF:
        return None
    batch = dataset_global_batch(dataset)
    local = _local_replicas(strategy)
    split = f", split over its {local} replicas" if local > 1 else ""
    _logging.log_once(
        "tfdist_opt fit: the tf.data dataset has auto-sharding OFF on "
        f"{workers} workers: per-worker data, each worker's batch "
        f"({batch if batch is not None else 'not known before step 1'}) is its "
        f"share of the global batch"
        + (f" ({batch} x {workers} workers = {batch * workers})" if batch else "")
        + split
    )
    return batch if batch is not None else -1


def check_per_worker_batch(batch: int, local_replicas: int, workers: int) -> None:
    """Raises when a per-worker batch does not split over the worker's replicas.

    Args:
        batch: int. The batch each worker's dataset yields per step.
        local_replicas: int. Replicas on each worker.
        workers: int. Workers in the cluster.

    Raises:
        ValueError: `batch` is not a multiple of `local_replicas`; names the
            three numbers and suggests the nearest multiples (the batch a
            worker's replicas split evenly, so that every example weighs
            the same in the step).

    Example:
        >>> check_per_worker_batch(4, 2, 2)
    """
    if batch % local_replicas == 0:
        return
    lower = batch - batch % local_replicas
    upper = lower + local_replicas
    hint = f"{lower} or {upper}" if lower else f"{upper}"
    raise ValueError(
        "Invalid per-worker batch: a tf.data dataset with auto-sharding OFF "
        f"on {workers} workers is per-worker data, each worker's batch split "
        f"over its own {local_replicas} replicas, so it must be a multiple of "
        f"{local_replicas} for every example to weigh the same in the step. "
        f"Received: per-worker batch={batch}, replicas per worker="
        f"{local_replicas}, num_workers={workers} (global batch "
        f"{batch * workers}). Use e.g. {hint}."
    )


def per_worker_dataset_fn(strategy, dataset):
    """The `distribute_datasets_from_function` function for per-worker data.

    Each element of `dataset` is one worker's batch; it becomes one element
    per local replica (the worker's iterator hands consecutive elements to
    its replicas in turn): rows `[i*b//L, (i+1)*b//L)` for replica `i` of
    `L`, so a full batch splits evenly and a last, partial one as evenly as
    it can (a replica possibly getting an empty batch, as TF's own
    rebatching gives it).

    Args:
        strategy: the multi-worker strategy.
        dataset: `tf.data.Dataset`, per-worker data (`per_worker_batch`).

    Returns:
        A function of a `tf.distribute.InputContext` returning the dataset.
    """
    import tensorflow as tf

    workers = _num_workers(strategy)
    local = _local_replicas(strategy)
    if local == 1:
        return lambda _: dataset

    def pieces(index, element):
        rows = tf.shape(tf.nest.flatten(element)[0], out_type=tf.int64)[0]
        # A batch size not known before step 1 (a generator, a `map` after
        # `batch`) is checked on the first batch, which Keras reads before
        # step 1 to build the model: a later one may be an epoch's last.
        splits = tf.debugging.Assert(
            tf.logical_or(index > 0, rows % local == 0),
            [
                "Invalid per-worker batch: a tf.data dataset with auto-sharding "
                f"OFF on {workers} workers is per-worker data, each worker's "
                f"batch split over its own {local} replicas, so it must be a "
                f"multiple of {local} for every example to weigh the same in "
                "the step. Received: a first per-worker batch of rows=",
                rows,
            ],
        )
        with tf.control_dependencies([splits]):
            rows = tf.identity(rows)

        def piece(i):
            start, end = i * rows // local, (i + 1) * rows // local
            return tf.nest.map_structure(lambda t: _rows(t, start, end), element)

        return tf.data.Dataset.range(local).map(piece)

    return lambda _: dataset.enumerate().flat_map(pieces)


def _rows(value, start, end):
    import tensorflow as tf

    if isinstance(value, tf.SparseTensor):
        size = tf.concat([[end - start], value.dense_shape[1:]], 0)
        begin = tf.concat([[start], tf.zeros_like(value.dense_shape[1:])], 0)
        return tf.sparse.slice(value, begin, size)
    return value[start:end]


def check_fit_input(strategy, x) -> None:
    """Raises before step 1 when `x`'s global batch does not split evenly.

    Args:
        strategy: the model's `tf.distribute.Strategy`. Checked only for a
            `MirroredStrategy` or `MultiWorkerMirroredStrategy` with more
            than one replica in sync.
        x: what `fit` received as `x`. Checked only for a `tf.data.Dataset`
            whose batch `dataset_global_batch` finds.

    Raises:
        ValueError: the global batch is not a multiple of
            `strategy.num_replicas_in_sync`; names the global batch, the
            replicas and the workers, and suggests the nearest multiples.

    Example:
        >>> check_fit_input(strategy, tf.data.Dataset.range(16).batch(8))
    """
    import tensorflow as tf

    from tfdist_opt.gradients.binding import keras_binding as gradient_binding

    if not isinstance(x, tf.data.Dataset) or not isinstance(
        strategy, (tf.distribute.MirroredStrategy, tf.distribute.MultiWorkerMirroredStrategy)
    ):
        return
    replicas = strategy.num_replicas_in_sync
    if replicas <= 1:
        return
    per_worker = per_worker_batch(strategy, x)
    if per_worker is not None:
        if per_worker > 0:
            workers = _num_workers(strategy)
            check_per_worker_batch(per_worker, _local_replicas(strategy), workers)
        return
    batch = dataset_global_batch(x)
    if batch is None:
        _logging.log_once(
            "tfdist_opt fit: the tf.data dataset's batch size is not known "
            "before step 1 (a transformation after `batch`, such as `map`, "
            "or no `batch`), so its divisibility by the "
            f"{replicas} replicas is not checked; `batch` last, or "
            "`drop_remainder=True`, lets fit check it"
        )
        return
    binding = gradient_binding.binding_of(strategy)
    if binding is not None and binding.plan.path == "accumulation":
        # The same rule, in the batch contract's terms (micro x replicas).
        contract.micro_batch_from_dataset(batch, binding.options.grad_accum, replicas)
        return
    workers = _num_workers(strategy)
    shard_math.per_replica_batch_size(
        batch,
        replicas,
        num_workers=workers,
        where="the batch of the tf.data dataset given to `fit`: each step's "
        "global batch, split over the replicas in sync",
    )
