"""Inputs for coordinator training: per-worker datasets from arrays, datasets or functions.

Each worker runs its own input pipeline (`ClusterCoordinator.
create_per_worker_dataset`); a scheduled step takes the next batch of
whichever worker runs it. Training pipelines are repeated forever (a worker
that runs out of data would fail its step), so an epoch is
`steps_per_epoch` steps: given, or one pass over the data when its size is
known (arrays; a finite `tf.data.Dataset`; a dataset function, or a
`tfdist_opt.build_dataset` pipeline, whose dataset on the chief has a
known cardinality). TF gives every PS worker the same input context
(pipeline 0 of 1), so each worker reads all of the data, in its own order.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import tensorflow as tf

from tfdist_opt import private_api


def _is_array(x) -> bool:
    return isinstance(x, (np.ndarray, tf.Tensor)) or (
        isinstance(x, (list, tuple, dict))
        and x
        and all(
            isinstance(v, (np.ndarray, tf.Tensor))
            for v in (x.values() if isinstance(x, dict) else x)
        )
    )


def _first_len(x) -> int:
    leaf = tf.nest.flatten(x)[0]
    return int(leaf.shape[0])


def arrays_dataset(x, y=None, sample_weight=None) -> tf.data.Dataset:
    """An unbatched dataset of `(x, y[, sample_weight])` rows."""
    parts = (x,) if y is None else (x, y) if sample_weight is None else (x, y, sample_weight)
    return tf.data.Dataset.from_tensor_slices(parts if len(parts) > 1 else x)


def training_input(
    coordinator,
    x,
    y=None,
    sample_weight=None,
    batch_size: int | None = None,
    steps_per_epoch: int | None = None,
    shuffle: bool = True,
    seed: int | None = None,
    class_weight=None,
):
    """`(per_worker_dataset, element_spec, steps_per_epoch)` for `fit`.

    Args:
        coordinator: the `ClusterCoordinator`.
        x: numpy array(s) / tensors (with `y`), a `tf.data.Dataset` of batches,
            a function `input_context -> tf.data.Dataset` of batches run
            on every worker (like tf_keras's `DatasetCreator`), or what
            `tfdist_opt.build_dataset` returned for this strategy.
        y, sample_weight: arrays, with array `x` only.
        batch_size: int. Examples per step, for arrays only. Defaults to 32.
        steps_per_epoch: int or None. Required when the data's size is not
            known on the chief (an infinite or unknown-size dataset).
        shuffle: bool. Shuffle arrays (each worker its own order).
        seed: int or None. Shuffle seed, the same on every worker (so all
            workers see one order); None shuffles each worker differently.
        class_weight: dict `{class index: weight}` or None. Each batch's
            sample weights become `class_weight[y]` (Keras's own map).

    Raises:
        ValueError: a missing `steps_per_epoch`, `y` or `batch_size` with a
            dataset, or `class_weight` with sample weights or several outputs.
        TypeError: `x` of an unsupported type.
    """
    strategy = coordinator.strategy
    if _is_array(x):
        batch_size = 32 if batch_size is None else batch_size
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(
                "Invalid value for `batch_size`: expected a positive int. "
                f"Received: batch_size={batch_size!r}"
            )
        n = _first_len(x)
        if steps_per_epoch is None:
            steps_per_epoch = max(1, math.ceil(n / batch_size))
        # numpy, so the arrays become constants of the dataset function that
        # runs on each worker (a dataset made here lives on the chief).
        x, y, sample_weight = (
            None if v is None else tf.nest.map_structure(np.asarray, v)
            for v in (x, y, sample_weight)
        )
        spec = arrays_dataset(x, y, sample_weight).batch(batch_size).element_spec
        weigh = class_weight_fn(class_weight, spec)

        def dataset_fn(input_context):
            ds = arrays_dataset(x, y, sample_weight)
            if shuffle:
                # TF gives every PS worker input_pipeline_id 0, so a seed is the
                # same on all workers; None (the default) shuffles each differently.
                ds = ds.shuffle(n, seed=seed, reshuffle_each_iteration=True)
            return weigh(ds.repeat().batch(batch_size)).prefetch(2)

        per_worker = coordinator.create_per_worker_dataset(
            lambda: strategy.distribute_datasets_from_function(dataset_fn)
        )
        return per_worker, _weighted_spec(spec, class_weight), _check_steps(steps_per_epoch)
    _refuse_array_arguments(x, y, sample_weight, batch_size)
    if isinstance(x, tf.data.Dataset):
        spec = x.element_spec
        steps_per_epoch = _steps_or_size(steps_per_epoch, x, strategy)
        weigh = class_weight_fn(class_weight, spec)
        per_worker = coordinator.create_per_worker_dataset(
            strategy.experimental_distribute_dataset(weigh(x).repeat())
        )
        return per_worker, _weighted_spec(spec, class_weight), steps_per_epoch
    fn, options = dataset_function(x)
    if fn is not None:
        chief_copy = fn(worker_input_context(strategy))
        spec = chief_copy.element_spec
        steps_per_epoch = _steps_or_size(steps_per_epoch, chief_copy, strategy)
        weigh = class_weight_fn(class_weight, spec)

        def repeated(input_context):
            return weigh(fn(input_context)).repeat()

        per_worker = coordinator.create_per_worker_dataset(
            lambda: strategy.distribute_datasets_from_function(repeated, options)
        )
        return per_worker, _weighted_spec(spec, class_weight), steps_per_epoch
    raise _bad_x(x)


def dataset_function(x) -> tuple[Callable[[Any], tf.data.Dataset] | None, Any]:
    """`(input_context -> Dataset, tf.distribute.InputOptions or None)` behind `x`.

    `x` is a dataset function, or the distributed dataset
    `tfdist_opt.build_dataset` returned under a parameter-server strategy
    (it carries its dataset function). `(None, None)` for anything else.

    Raises:
        TypeError: `x` is a distributed dataset made some other way (its
            dataset function cannot be repeated on the workers).
    """
    carried = getattr(x, "_tfdist_dataset_fn", None)
    if carried is not None:
        return carried
    if isinstance(x, (tf.distribute.DistributedDataset, tf.distribute.DistributedIterator)):
        raise TypeError(
            "Invalid value for `x`: a distributed dataset made by the strategy "
            "directly cannot be repeated on parameter-server workers. Received: "
            f"x={type(x).__name__}. Expected the dataset function itself "
            "(input_context -> tf.data.Dataset), a tf.data.Dataset, arrays, or "
            "tfdist_opt.build_dataset(...)."
        )
    if callable(x) and not isinstance(x, tf.data.Dataset):
        return x, None
    return None, None


def worker_input_context(strategy) -> tf.distribute.InputContext:
    """The input context TF gives each PS worker's dataset function: pipeline 0 of 1."""
    return tf.distribute.InputContext(
        num_input_pipelines=1,
        input_pipeline_id=0,
        num_replicas_in_sync=strategy.num_replicas_in_sync,
    )


def class_weight_fn(class_weight, element_spec) -> Callable[[tf.data.Dataset], tf.data.Dataset]:
    """`dataset -> dataset` adding Keras's class-weight sample weights (or identity).

    Raises:
        ValueError: `class_weight` is not a `{int: number}` dict, or the
            batches already carry sample weights, have no `y`, or a nested `y`.
    """
    if class_weight is None:
        return lambda ds: ds
    if (
        not isinstance(class_weight, dict)
        or not class_weight
        or not all(
            isinstance(k, (int, np.integer))
            and not isinstance(k, bool)
            and k >= 0
            and isinstance(v, (int, float, np.number))
            and not isinstance(v, bool)
            for k, v in class_weight.items()
        )
    ):
        raise ValueError(
            "Invalid value for `class_weight`: expected a non-empty dict "
            "{class index (int >= 0): weight (number)}. Received: "
            f"class_weight={class_weight!r}"
        )
    import keras

    _, y, sw = keras.utils.unpack_x_y_sample_weight(_as_tuple(element_spec))
    if sw is not None or y is None or tf.nest.is_nested(y):
        what = (
            "the data already carries sample weights"
            if sw is not None
            else "the data has no targets `y`"
            if y is None
            else "`y` is nested (several outputs)"
        )
        raise ValueError(
            f"Invalid value for `class_weight`: {what}. Received: class_weight="
            f"{class_weight!r}. Expected class_weight with a single-output "
            "(x, y) input and no sample_weight."
        )
    map_fn = private_api.make_class_weight_map_fn(class_weight)
    return lambda ds: ds.map(map_fn)


def _as_tuple(spec):
    return spec if isinstance(spec, tuple) else (spec,)


def _weighted_spec(spec, class_weight):
    """The element spec after `class_weight_fn` (x, y, float sample weights)."""
    if class_weight is None:
        return spec
    x, y = _as_tuple(spec)[:2]
    return (x, y, tf.TensorSpec(y.shape[:1], tf.float32))


def _steps_or_size(steps_per_epoch, dataset: tf.data.Dataset, strategy) -> int:
    if steps_per_epoch is not None:
        return _check_steps(steps_per_epoch)
    size = int(dataset.cardinality())
    if size > 0:
        # Each step of a worker takes one batch per replica of that worker.
        return max(1, size // max(1, strategy.num_replicas_in_sync))
    raise ValueError(
        "Invalid value for `steps_per_epoch`: parameter-server training repeats "
        "each worker's dataset forever, and this dataset's size is "
        f"{'infinite' if size == tf.data.INFINITE_CARDINALITY else 'unknown'}, so "
        "an epoch must be given in steps. Received: steps_per_epoch=None. "
        "Expected a positive int."
    )


def _refuse_array_arguments(x, y, sample_weight, batch_size) -> None:
    if y is not None or sample_weight is not None:
        raise ValueError(
            "Invalid value for `y`: `y`/`sample_weight` go with array `x` only; a "
            "dataset or dataset function yields (x, y[, sample_weight]) itself. "
            f"Received: x={type(x).__name__}, y={type(y).__name__}, "
            f"sample_weight={type(sample_weight).__name__}"
        )
    if batch_size is not None:
        raise ValueError(
            "Invalid value for `batch_size`: it goes with array `x` only; a dataset "
            "or dataset function is batched already. Received: batch_size="
            f"{batch_size!r} with x={type(x).__name__}. Expected None."
        )


def _bad_x(x) -> TypeError:
    return TypeError(
        "Invalid value for `x`: expected numpy arrays or tensors (with `y`), a "
        "tf.data.Dataset of batches, a function input_context -> "
        "tf.data.Dataset, or tfdist_opt.build_dataset(...). "
        f"Received: x={type(x).__name__}"
    )


def split_validation(x, y, sample_weight, validation_split):
    """Keras's `validation_split`: the last fraction of the arrays, unshuffled.

    Returns `((x, y, sample_weight), (x_val, y_val, sample_weight_val))`.

    Raises:
        ValueError: `validation_split` not in (0, 1), `x` not arrays, or too
            few rows to split.
    """
    if (
        isinstance(validation_split, bool)
        or not isinstance(validation_split, (int, float))
        or not 0 < validation_split < 1
    ):
        raise ValueError(
            "Invalid value for `validation_split`: expected a float in "
            f"(0, 1). Received: validation_split={validation_split!r}"
        )
    if not _is_array(x):
        raise ValueError(
            "Invalid value for `validation_split`: it splits arrays only. Received: "
            f"validation_split={validation_split!r} with x={type(x).__name__}. "
            "Expected array `x`, or pass validation_data."
        )
    n = _first_len(x)
    split_at = int(math.floor(n * (1.0 - validation_split)))
    if split_at in (0, n):
        raise ValueError(
            f"Invalid value for `validation_split`: {n} rows cannot be split. "
            f"Received: validation_split={validation_split!r}. Expected a split "
            "leaving rows on both sides."
        )

    def part(lo, hi):
        return tuple(
            None if v is None else tf.nest.map_structure(lambda a: np.asarray(a)[lo:hi], v)
            for v in (x, y, sample_weight)
        )

    return part(0, split_at), part(split_at, n)


def chief_dataset(
    x, y=None, sample_weight=None, batch_size: int | None = None, steps: int | None = None
) -> tf.data.Dataset:
    """A finite, ordered dataset read on the chief (evaluate, predict)."""
    if _is_array(x):
        ds = arrays_dataset(x, y, sample_weight).batch(batch_size or 32)
    else:
        _refuse_array_arguments(x, y, sample_weight, batch_size)
        if isinstance(x, tf.data.Dataset):
            ds = x
        else:
            fn, _ = dataset_function(x)
            if fn is None:
                raise _bad_x(x)
            ds = fn(tf.distribute.InputContext())
    return ds.take(steps) if steps is not None else ds


def _check_steps(steps: Any) -> int:
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(
            "Invalid value for `steps_per_epoch`: expected a positive "
            f"int. Received: steps_per_epoch={steps!r}"
        )
    return steps
