"""The batch Keras builds a model from under a strategy: one replica's, not a mean.

Before its first step under a strategy, Keras 3's TensorFlow trainer
(`_maybe_symbolic_build`) pulls one distributed batch and reduces it with
`strategy.reduce("MEAN", batch, axis=None)` to get an ordinary batch to
build the model from. Only its shapes and dtypes matter, but the mean adds
the replicas' batches element by element, so it fails whenever they differ
in shape: a global batch the replicas do not divide (5 examples on 2
replicas: `AddN ... [3,5] != [2,5]`), fewer examples than replicas, or
`predict` on one example; and it cannot add strings or bools at all.

While `building()` is entered, our strategies answer that reduce with the
first local replica's value of each component instead (`local_batch`):
the same shapes (but the batch dimension) and dtypes, nothing added,
nothing sent between workers (each worker takes its own first replica's
batch, which has the same structure everywhere).

A model Keras first builds inside `fit` (a `Sequential` without an
`Input`, created in our scope) has not yet got our subclass when Keras
reduces its first batch, so `building()` is not entered. Our strategies
then `arm()` when they distribute a dataset, and answer the next reduce of
a batch of that dataset's structure the same way, when a mean of it cannot
be computed (`unaddable`: the replicas' batches differ in shape, or a
component is a string or bool), where TF would fail: Keras's
`_maybe_symbolic_build` is that reduce (it distributes its input, then
pulls and reduces the first batch). A mean that can be computed is left
to TF, except under the multi-worker strategy, where every worker must
decide alike without seeing the others' batches: there it is always one
replica's batch.
"""

from __future__ import annotations

import contextlib
import threading

_STATE = threading.local()


@contextlib.contextmanager
def building():
    """Marks the current thread as building a model from its first batch."""
    previous = getattr(_STATE, "depth", 0)
    _STATE.depth = previous + 1
    try:
        yield
    finally:
        _STATE.depth = previous


def active() -> bool:
    """True inside `building()` on this thread."""
    return getattr(_STATE, "depth", 0) > 0


def arm(strategy, distributed) -> None:
    """Notes that `strategy` just distributed `distributed` (this thread).

    Args:
        strategy: the strategy that distributed the dataset.
        distributed: the `tf.distribute.DistributedDataset` it returned.
    """
    import weakref

    _STATE.armed = (weakref.ref(strategy), distributed.element_spec)


def disarm() -> None:
    """Forgets `arm` (this thread): the model builds its own way (`building`)."""
    _STATE.armed = None


def take_armed(strategy, reduce_op, value, only_unaddable: bool = True) -> bool:
    """True (once) when `value` is a first batch `arm` announced.

    Args:
        strategy: the strategy asked to reduce `value`.
        reduce_op: the reduction asked for (Keras asks "MEAN").
        value: what it was asked to reduce (with `axis=None`).
        only_unaddable: bool. Only a batch TF cannot average
            (`unaddable`). The multi-worker strategy passes False: whether
            another worker's batch can be added is not known here, and every
            worker must take the same path (a mean is a collective).

    Returns:
        True for an eager MEAN when `strategy` armed this thread and
        `value` is a batch of the dataset it distributed: its structure,
        every leaf a `tf.distribute.DistributedValues` that fits the
        dataset's spec (and, with `only_unaddable`,
        `unaddable(strategy, value)`); the arming is then used up. A
        loss or metric reduced in a custom loop does not fit the spec.
    """
    import tensorflow as tf

    armed = getattr(_STATE, "armed", None)
    if armed is None or armed[0]() is not strategy or tf.inside_function():
        return False
    if str(getattr(reduce_op, "value", reduce_op)).upper() != "MEAN":
        return False
    try:
        tf.nest.assert_same_structure(armed[1], value, check_types=False)
    except (TypeError, ValueError):
        return False
    specs, leaves = tf.nest.flatten(armed[1]), tf.nest.flatten(value)
    if not leaves or not all(isinstance(v, tf.distribute.DistributedValues) for v in leaves):
        return False
    for spec, leaf in zip(specs, leaves):
        if not spec.is_compatible_with(tf.type_spec_from_value(leaf)):
            return False
    if only_unaddable and not unaddable(strategy, value):
        return False
    _STATE.armed = None
    return True


def unaddable(strategy, value) -> bool:
    """True when the replicas' values of some component cannot be added.

    Their shapes differ (an uneven batch), the component is a string or
    bool (no `AddN` for either), or it is sparse or ragged (TF's
    cross-device reduce fails on those).
    """
    import tensorflow as tf

    for v in tf.nest.flatten(value):
        if not isinstance(v, tf.distribute.DistributedValues):
            continue
        local = strategy.experimental_local_results(v)
        if isinstance(local[0], (tf.SparseTensor, tf.RaggedTensor)):
            return True  # TF's reduce reads `.device`, which they lack
        if local[0].dtype in (tf.string, tf.bool):
            return True
        shapes = {tuple(t.shape) for t in local}
        if len(shapes) > 1:
            return True
    return False


def local_batch(strategy, value):
    """Each distributed component of `value` as its first local replica's value.

    Args:
        strategy: the `tf.distribute.Strategy` that distributed `value`.
        value: a nest of `tf.distribute.DistributedValues`, tensors, arrays
            or None.

    Returns:
        The same nest, each `DistributedValues` replaced by
        `strategy.experimental_local_results(v)[0]`; other leaves as they are.
    """
    import tensorflow as tf

    def one(v):
        if isinstance(v, tf.distribute.DistributedValues):
            return strategy.experimental_local_results(v)[0]
        return v

    return tf.nest.map_structure(one, value)
