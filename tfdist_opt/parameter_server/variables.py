"""Keras 3 variables under parameter servers: shards, an exact step counter, placement.

Four upstream gaps are closed here, each for one model/optimizer instance
(never by patching Keras classes for the whole process):

- Keras 3 `Variable.assign_add` is `assign(self + value)`
  (keras/src/backend/common/variables.py), a read then a write: with two
  workers stepping concurrently, `optimizer.iterations` reached 41 of 60
  steps on TF 2.21 + Keras 3.15, so learning-rate schedules and Adam's bias
  correction drift. `make_counter_atomic` gives the counter an
  `assign_add` that is one `AssignAddVariableOp` on its parameter server.
- A partitioned variable (`variable_partitioner=...`) is a
  `ShardedVariable`, which has no `handle`, so `tape.gradient` on the Keras
  variable fails (`'ShardedVariable' object has no attribute 'handle'`,
  keras/src/backend/tensorflow/core.py). `gradient_targets` lists the
  shards instead; the optimizer builds one slot per shard, colocated with it.
- Keras's `Embedding.call` converts its table to one dense tensor (a
  concat of every shard, sent to the worker each step). `route_sharded_lookups`
  makes the layer look up rows per shard with `tf.nn.embedding_lookup`, so a
  step moves only the rows it touches.
- Keras saving reads a variable with `np.asarray`, which a
  `ShardedVariable` cannot answer; `make_sharded_savable` makes it read
  the shards.
"""

from __future__ import annotations

import types
from typing import Iterable

import keras
import numpy as np
import tensorflow as tf

from tfdist_opt import _class_swap
from tfdist_opt import runtime

ShardedVariable = tf.__internal__.distribute.ShardedVariable


def raw(variable):
    """The TF object behind a Keras variable (a tf.Variable or ShardedVariable)."""
    return variable.value if isinstance(variable, keras.Variable) else variable


def is_sharded(variable) -> bool:
    return isinstance(raw(variable), ShardedVariable)


def gradient_targets(variables: Iterable) -> list:
    """What to differentiate and update: each variable, or its shards.

    Keras variables stay as they are (the optimizer reads their constraint
    and path); a Keras variable holding a `ShardedVariable` is replaced by
    its shard `tf.Variable`s, in order.
    """
    out = []
    for v in variables:
        value = raw(v)
        if isinstance(value, ShardedVariable):
            out.extend(value.variables)
        else:
            out.append(v)
    return out


def make_counter_atomic(counter) -> None:
    """Makes `counter.assign_add` one atomic op on the variable's device.

    `counter` is a Keras integer variable (`optimizer.iterations`). Its class
    is swapped for a subclass of its own class that overrides only
    `assign_add`; idempotent.

    Raises:
        TypeError: `counter` is not a Keras variable.
    """
    if not isinstance(counter, keras.Variable):
        raise TypeError(
            "Invalid value for `counter`: expected a Keras variable "
            f"(optimizer.iterations). Received: {type(counter).__name__}"
        )
    cls = type(counter)
    if issubclass(cls, _AtomicAssignAdd):
        return
    counter.__class__ = _atomic_class(cls)


class _AtomicAssignAdd:
    """`assign_add` as one `tf.Variable.assign_add` (Keras 3's is assign(self + v))."""

    def assign_add(self, value):
        tf_var = self.value  # the tf.Variable (integer: never autocast)
        return tf_var.assign_add(tf.cast(value, tf_var.dtype))


def _atomic_class(base: type) -> type:
    return _class_swap.cached_subclass(_AtomicAssignAdd, base)


def make_sharded_savable(variables: Iterable) -> int:
    """Lets Keras saving read each Keras variable that holds a `ShardedVariable`.

    Keras 3's saving (`save`, `save_weights`, so `ModelCheckpoint` and
    `BackupAndRestore`) reads a variable with `np.asarray(variable)`, whose
    `__array__` calls `value.__array__`, which a `ShardedVariable` lacks
    (`AttributeError: 'ShardedVariable' object has no attribute
    '__array__'`, TF 2.21 + Keras 3.15). The class of each such variable is
    swapped for a subclass of its own whose `__array__` reads the shards
    (concatenated); loading already works (`ShardedVariable.assign` slices
    the full value into its shards). Returns how many were swapped now.
    """
    n = 0
    for v in variables:
        if isinstance(v, keras.Variable) and is_sharded(v) and not isinstance(v, _ShardedArray):
            v.__class__ = _class_swap.cached_subclass(_ShardedArray, type(v))
            n += 1
    return n


class _ShardedArray:
    """`__array__` for a Keras variable holding a `ShardedVariable`."""

    def __array__(self, dtype=None, copy=None):
        del copy
        return np.asarray(tf.convert_to_tensor(self.value).numpy(), dtype=dtype)


def route_sharded_lookups(model: keras.Model) -> int:
    """Makes each `Embedding` whose table is sharded look rows up per shard.

    Sets an instance-level `call` on those layers (their class, config and
    saved format are unchanged). Returns how many layers were routed.
    """
    routed = 0
    for layer in model._flatten_layers(include_self=False):
        if not isinstance(layer, keras.layers.Embedding):
            continue
        if not layer.built or not is_sharded(layer.embeddings):
            continue
        state = runtime.OBJECTS.of(layer)
        if state.sharded_call:
            routed += 1
            continue
        layer.call = types.MethodType(_sharded_embedding_call, layer)
        state.sharded_call = True
        routed += 1
    return routed


def _sharded_embedding_call(self, inputs):
    if inputs.dtype not in (tf.int32, tf.int64):
        inputs = tf.cast(inputs, tf.int32)
    table = raw(self.embeddings)
    if isinstance(table, ShardedVariable):
        # ShardedVariable dispatches this to a per-shard gather.
        outputs = tf.nn.embedding_lookup(table, inputs)
    else:
        outputs = tf.gather(tf.convert_to_tensor(table), inputs)
    return tf.cast(outputs, self.compute_dtype)


def placement(model: keras.Model, optimizer=None) -> dict[str, str]:
    """`{name: device}` of every model and optimizer variable (shards listed).

    For asserting that nothing lives on the chief.
    """
    out: dict[str, str] = {}

    def add(name, v):
        value = raw(v)
        if isinstance(value, ShardedVariable):
            for i, shard in enumerate(value.variables):
                out[f"{name}/shard_{i}"] = shard.device
        else:
            out[name] = value.device

    for v in model.variables:
        add(v.path, v)
    if optimizer is not None:
        for v in optimizer.variables:
            add(getattr(v, "path", v.name), v)
    return out


def off_ps(placements: dict[str, str]) -> dict[str, str]:
    """The entries of `placement()` not on a `/job:ps` task."""
    return {k: d for k, d in placements.items() if "/job:ps/" not in d}
