"""Inputs for coordinator training: per-worker datasets from arrays, datasets or functions.

Each worker runs its own input pipeline (`ClusterCoordinator.
create_per_worker_dataset`); a scheduled step takes the next batch of
whichever worker runs it. Training pipelines are repeated forever (a worker
that runs out of data would fail its step), so an epoch is
`steps_per_epoch` steps, inferred only for arrays.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np
import tensorflow as tf


def _is_array(x) -> bool:
    return isinstance(x, (np.ndarray, tf.Tensor)) or (
        isinstance(x, (list, tuple, dict)) and x and all(
            isinstance(v, (np.ndarray, tf.Tensor))
            for v in (x.values() if isinstance(x, dict) else x)))


def _first_len(x) -> int:
    leaf = tf.nest.flatten(x)[0]
    return int(leaf.shape[0])


def arrays_dataset(x, y=None, sample_weight=None) -> tf.data.Dataset:
    """An unbatched dataset of `(x, y[, sample_weight])` rows."""
    parts = (x,) if y is None else (x, y) if sample_weight is None else (
        x, y, sample_weight)
    return tf.data.Dataset.from_tensor_slices(parts if len(parts) > 1 else x)


def training_input(coordinator, x, y=None, sample_weight=None,
                   batch_size: int | None = None, steps_per_epoch: int | None = None,
                   shuffle: bool = True, seed: int | None = None):
    """`(per_worker_dataset, element_spec, steps_per_epoch)` for `fit`.

    Args:
        coordinator: the `ClusterCoordinator`.
        x: numpy array(s) / tensors (with `y`), a `tf.data.Dataset` of batches,
            or a function `input_context -> tf.data.Dataset` of batches run
            on every worker (like tf_keras's `DatasetCreator`).
        y, sample_weight: arrays, with array `x` only.
        batch_size: int. Examples per step, for arrays. Defaults to 32.
        steps_per_epoch: int or None. Required unless `x` holds arrays.
        shuffle: bool. Shuffle arrays (each worker its own order).
        seed: int or None. Shuffle seed, the same on every worker (so all
            workers see one order); None shuffles each worker differently.

    Raises:
        ValueError: a missing `steps_per_epoch`, or `y` with a dataset.
        TypeError: `x` of an unsupported type.
    """
    strategy = coordinator.strategy
    if _is_array(x):
        batch_size = 32 if batch_size is None else batch_size
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError("Invalid value for `batch_size`: expected a positive int. "
                             f"Received: batch_size={batch_size!r}")
        n = _first_len(x)
        if steps_per_epoch is None:
            steps_per_epoch = max(1, math.ceil(n / batch_size))
        # numpy, so the arrays become constants of the dataset function that
        # runs on each worker (a dataset made here lives on the chief).
        x, y, sample_weight = (None if v is None else tf.nest.map_structure(np.asarray, v)
                               for v in (x, y, sample_weight))

        def dataset_fn(input_context):
            ds = arrays_dataset(x, y, sample_weight)
            if shuffle:
                # TF gives every PS worker input_pipeline_id 0, so a seed is the
                # same on all workers; None (the default) shuffles each differently.
                ds = ds.shuffle(n, seed=seed, reshuffle_each_iteration=True)
            return ds.repeat().batch(batch_size).prefetch(2)

        spec = arrays_dataset(x, y, sample_weight).batch(batch_size).element_spec
        per_worker = coordinator.create_per_worker_dataset(
            lambda: strategy.distribute_datasets_from_function(dataset_fn))
        return per_worker, spec, _check_steps(steps_per_epoch)
    if y is not None or sample_weight is not None:
        raise ValueError(
            "Invalid value for `y`: `y`/`sample_weight` go with array `x` only; a "
            "dataset or dataset function yields (x, y[, sample_weight]) itself. "
            f"Received: x={type(x).__name__}, y={type(y).__name__}")
    if steps_per_epoch is None:
        raise ValueError(
            "Invalid value for `steps_per_epoch`: parameter-server training repeats "
            "each worker's dataset forever, so an epoch must be given in steps. "
            "Received: steps_per_epoch=None. Expected a positive int.")
    if isinstance(x, tf.data.Dataset):
        spec = x.element_spec
        per_worker = coordinator.create_per_worker_dataset(
            strategy.experimental_distribute_dataset(x.repeat()))
        return per_worker, spec, _check_steps(steps_per_epoch)
    if callable(x):
        fn: Callable[[Any], tf.data.Dataset] = x
        spec = fn(tf.distribute.InputContext()).element_spec

        def repeated(input_context):
            return fn(input_context).repeat()

        per_worker = coordinator.create_per_worker_dataset(
            lambda: strategy.distribute_datasets_from_function(repeated))
        return per_worker, spec, _check_steps(steps_per_epoch)
    raise TypeError(
        "Invalid value for `x`: expected numpy arrays or tensors (with `y`), a "
        "tf.data.Dataset of batches, or a function input_context -> "
        f"tf.data.Dataset. Received: x={type(x).__name__}")


def chief_dataset(x, y=None, sample_weight=None, batch_size: int | None = None,
                  steps: int | None = None) -> tf.data.Dataset:
    """A finite, ordered dataset read on the chief (evaluate, predict)."""
    if _is_array(x):
        ds = arrays_dataset(x, y, sample_weight).batch(batch_size or 32)
    elif isinstance(x, tf.data.Dataset):
        ds = x
    elif callable(x):
        ds = x(tf.distribute.InputContext())
    else:
        raise TypeError(
            "Invalid value for `x`: expected numpy arrays or tensors, a "
            "tf.data.Dataset, or a function input_context -> tf.data.Dataset. "
            f"Received: x={type(x).__name__}")
    return ds.take(steps) if steps is not None else ds


def _check_steps(steps: Any) -> int:
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError("Invalid value for `steps_per_epoch`: expected a positive "
                         f"int. Received: steps_per_epoch={steps!r}")
    return steps
