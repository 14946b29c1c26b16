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
