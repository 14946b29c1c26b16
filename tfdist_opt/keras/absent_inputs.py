"""`None` components of a `tf.data` input to `fit` / `evaluate` on several replicas.

Keras takes a dataset whose elements leave a part out with `None`: `(x, y,
None)` (no sample weights) or `(x, None)` (no targets), and trains on it on
one device. TF's distributed input cannot carry a `None` to the replicas:
its iterator builds a stand-in of every component for a replica left
without data (`input_lib._dummy_tensor_fn`) and reads each component's
shape, which a `None` has not (`AttributeError: 'NoneTensorSpec' object
has no attribute 'shape'`; TF's plain `MirroredStrategy` fails too).

Trailing `None`s of the top-level `(x, y, sample_weight)` tuple mean the
same to Keras as leaving them out (`keras.utils.unpack_x_y_sample_weight`),
so `without_absent` leaves them out before the dataset is distributed. A
`None` anywhere else (an optional input in a dict, a `None` inside `x`)
changes the structure the model is called with: refused with an error
naming where it is.
"""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=None)
def _none_spec():
    import tensorflow as tf

    return tf.data.Dataset.from_tensors((0, None)).element_spec[1]


def _is_none(spec) -> bool:
    return spec == _none_spec()


def _paths(spec, prefix: str):
    """`(path, leaf spec)` for each leaf of a nest of specs."""
    if isinstance(spec, dict):
        for key in spec:
            yield from _paths(spec[key], f"{prefix}[{key!r}]")
    elif isinstance(spec, (tuple, list)):
        for i, item in enumerate(spec):
            yield from _paths(item, f"{prefix}[{i}]")
    else:
        yield prefix, spec


def without_absent(strategy, x):
    """`x` without the `None`s the replicas cannot be fed.

    Args:
        strategy: the model's `tf.distribute.Strategy`. Nothing changes
            with one replica in sync.
        x: what `fit` or `evaluate` received as `x`. Only a
            `tf.data.Dataset` is looked at.

    Returns:
        `x`, or for a dataset of tuples ending in `None` (`(x, y, None)`,
        `(x, None)`), the dataset of the tuples without those `None`s.

    Raises:
        ValueError: any other component of the dataset's elements is
            `None`; names where (`element[0]['b']`).

    Example:
        >>> ds = tf.data.Dataset.from_tensors((x, y, None))
        >>> without_absent(strategy, ds).element_spec  # (x's spec, y's spec)
    """
    import tensorflow as tf

    if not isinstance(x, tf.data.Dataset) or strategy.num_replicas_in_sync <= 1:
        return x
    spec = x.element_spec
    keep = len(spec) if isinstance(spec, tuple) else None
    if keep is not None:
        while keep > 1 and _is_none(spec[keep - 1]):
            keep -= 1
    kept = spec[:keep] if keep is not None else spec
    absent = [path for path, leaf in _paths(kept, "element") if _is_none(leaf)]
    if absent:
        raise ValueError(
            "Invalid value for `x`: a tf.data dataset whose elements hold None "
            f"at {', '.join(absent)}. TF's distributed input cannot feed None "
            f"to the {strategy.num_replicas_in_sync} replicas in sync; Keras "
            "takes None only as a left-out target or sample weight at the end "
            "of the (x, y, sample_weight) tuple. Expected: a tensor there, or "
            "the input given to `fit` as arrays, where Keras takes a None input "
            f"on several replicas. Received: element_spec={spec}"
        )
    if keep is None or keep == len(spec):
        return x
    if keep == 1:
        return x.map(lambda *element: element[0])
    return x.map(lambda *element: element[:keep])
