"""Optimizer variables that keep a different value on each replica: saving.

Three kinds of optimizer state hold a different value per replica in an
`ON_READ` variable: ZeRO slot shards (`sharded_state`), PowerSGD error
buffers (`lowrank`) and `grad_accum` accumulators (`accumulation`). TF saves an `ON_READ` variable as one aggregate (the
first replica's value, or the SUM over replicas) and restores that to every
replica (SUM: sum / n each; TF's `values_util.on_read_assign_cross_replica`),
so each replica's own value is lost. A `SavedWhole` variable (its Keras
variable's class swapped per instance) saves `_tfdist_saved_value()` and
restores through `_tfdist_load_value(value)` on every saving path:

* `tf.train.Checkpoint` and `DistributedBackupAndRestore`: the Trackable
  protocol (`_serialize_to_tensors` / `_restore_from_tensors`);
* `model.save` / `.keras` load: the hooked optimizer's
  `save_own_variables` / `load_own_variables` call `save_variables` /
  `load_variables` here (Keras writes `variable.numpy()` otherwise).

`add_slot` creates such a variable and swaps its class before the
optimizer tracks it, so a deferred checkpoint restore (an optimizer built
after `Checkpoint.restore`) reaches the swapped methods.

`PerReplicaSum` is the mixin of a variable whose meaning is the SUM over
replicas of per-replica values (PowerSGD's residuals, `grad_accum`'s
accumulators): it saves every
replica's value stacked along a new leading axis of size n, in data-slot
order (the slice of each global batch the replica trains on;
`tfdist_opt.strategy.devices.virtual_replicas.data_slot`: the replica id on one
worker, or with one replica per worker), and restores each replica the
slice of its data slot, bit for bit. So with a fixed replica count
(`StrategyConfig.replicas`) the state follows the examples across a
change of the worker count. A checkpoint
from another replica count (m != n slices), or an older one holding the
plain sum (the variable's own shape), restores as that sum spread evenly,
sum / n on every replica: the total is kept, the split is not.
"""

from __future__ import annotations

import contextlib

import tensorflow as tf

from tfdist_opt import _class_swap
from tfdist_opt import runtime
from tfdist_opt.strategy.devices import virtual_replicas


class SavedWhole:
    """Mixin on a Keras variable: saves and loads through two methods.

    A subclass defines `_tfdist_saved_value()` (cross-replica: the tensor to
    write) and `_tfdist_load_value(value)` (assigns every local replica).
    """

    def _serialize_to_tensors(self):
        return {"VARIABLE_VALUE": self._tfdist_saved_value()}

    def _restore_from_tensors(self, restored_tensors):
        self._tfdist_load_value(restored_tensors["VARIABLE_VALUE"])
        return self.value


class PerReplicaSum(SavedWhole):
    """Mixin: every replica's value, stacked (n, *shape); see the module doc."""

    def _tfdist_saved_value(self):
        strategy = self._tfdist_strategy
        n = strategy.num_replicas_in_sync
        flat = concat_replicas(strategy, getattr(self, "value", self))
        stacked = tf.reshape(flat, [n, *self.shape])
        slots = data_slots(strategy)
        if slots == list(range(n)):
            return stacked
        by_slot = sorted(range(n), key=lambda r: slots[r])
        return tf.gather(stacked, by_slot)

    def _tfdist_load_value(self, value):
        strategy = self._tfdist_strategy
        n = strategy.num_replicas_in_sync
        value = tf.cast(tf.convert_to_tensor(value), self.dtype)
        shape = tuple(self.shape)
        got = tuple(value.shape)
        if got == (n, *shape):
            slots = data_slots(strategy)
            assign_replicas(strategy, getattr(self, "value", self), lambda r: value[slots[r]])
            return
        if got == shape:  # an older checkpoint: the sum over replicas
            total = value
        elif len(got) == len(shape) + 1 and got[1:] == shape:
            total = tf.reduce_sum(value, axis=0)  # another replica count
        else:
            raise ValueError(
                f"Invalid value for `{self.path}` in the checkpoint: expected "
                f"shape {(n, *shape)} (one slice per replica) or {shape} (their "
                f"sum). Received: shape={got}"
            )
        even = tf.cast(total / n, self.dtype)
        assign_replicas(strategy, getattr(self, "value", self), lambda r: even)


def on_read_sum(next_creator, **kwargs):
    """A variable creator for per-replica state: each replica its own value
    (`ON_READ`), their SUM when read across replicas. Keras's
    `add_variable` has no `synchronization` argument, so it is set on the
    `tf.Variable` the Keras variable creates (`tf.variable_creator_scope`)."""
    kwargs["synchronization"] = tf.VariableSynchronization.ON_READ
    kwargs["aggregation"] = tf.VariableAggregation.SUM
    return next_creator(**kwargs)


@contextlib.contextmanager
def creation_scope(strategy):
    """Where an optimizer's state variables are made: outside any function
    being traced (`tf.init_scope`), under `strategy`'s scope unless it is
    the current strategy already (a hooked `build` runs under it or not)."""
    with tf.init_scope():
        if tf.distribute.get_strategy() is strategy:
            yield
        else:
            with strategy.scope():
                yield


def add_slot(optimizer, reference, name, shape, initializer, creator, mixin: type, **attrs):
    """Creates an optimizer variable like `add_variable_from_reference`.

    Args:
        optimizer: the Keras 3 TF optimizer (being built).
        reference: the model variable the slot belongs to (colocated).
        name: str. The slot's name suffix (Keras's naming: path_name).
        shape: the slot's shape.
        initializer: a Keras initializer or its name.
        creator: a `tf.variable_creator_scope` function (ON_READ etc.).
        mixin: a `SavedWhole` subclass put in front of the variable's class.
        **attrs: set on the variable before it is tracked.

    Returns:
        The Keras variable, tracked by `optimizer`.
    """
    import keras

    name = name or "var"
    if hasattr(reference, "path"):
        name = f"{reference.path.replace('/', '_')}_{name}"
    with (
        optimizer._distribution_strategy.extended.colocate_vars_with(
            getattr(reference, "value", reference)
        ),
        tf.variable_creator_scope(creator),
    ):
        with keras.name_scope(optimizer.name, caller=optimizer):
            variable = keras.Variable(
                initializer=keras.initializers.get(initializer),
                shape=shape,
                dtype=reference.dtype,
                trainable=False,
                name=name,
            )
    variable.__class__ = _class_swap.cached_subclass(mixin, type(variable))
    for k, v in attrs.items():
        setattr(variable, k, v)
    optimizer._track_variable(variable)
    return variable


def save_variables(optimizer, store) -> None:
    """Keras `save_own_variables`: a `SavedWhole` variable saves its value."""
    for i, variable in enumerate(optimizer.variables):
        store[str(i)] = (
            variable._tfdist_saved_value().numpy()
            if isinstance(variable, SavedWhole)
            else variable.numpy()
        )


def load_variables(optimizer, store) -> bool:
    """Keras `load_own_variables`; False (nothing loaded) on a count mismatch."""
    if len(store.keys()) != len(optimizer.variables):
        return False
    for i, variable in enumerate(optimizer.variables):
        if isinstance(variable, SavedWhole):
            variable._tfdist_load_value(store[str(i)])
        else:
            variable.assign(store[str(i)])
    return True


def has_saved_whole(optimizer) -> bool:
    """Whether any of `optimizer`'s variables is `SavedWhole`."""
    return any(isinstance(v, SavedWhole) for v in optimizer.variables)


def concat_replicas(strategy, tv) -> tf.Tensor:
    """Every replica's component of `tv`, concatenated on axis 0 in id order.

    Cross-replica; a collective (`strategy.gather`) only when some replicas
    are on other workers, so every worker must call it.
    """
    comps = list(getattr(tv, "values", (tv,)))
    if len(comps) == strategy.num_replicas_in_sync:  # all here: no collective
        ids = local_replica_ids(strategy)
        order = sorted(range(len(comps)), key=lambda i: ids[i])
        return tf.concat([comps[i].read_value() for i in order], axis=0)
    return strategy.gather(tv, axis=0)


def assign_replicas(strategy, tv, value_of) -> None:
    """Assigns each local component of `tv` `value_of(its replica id)`."""
    ids = local_replica_ids(strategy)
    for i, comp in enumerate(getattr(tv, "values", (tv,))):
        with tf.device(comp.device):
            comp.assign(value_of(ids[i]))


def data_slots(strategy) -> list[int]:
    """The data slot of each global replica id (see the module docstring)."""
    n = strategy.num_replicas_in_sync
    local = len(strategy.extended.worker_devices)
    workers = max(1, n // max(1, local))
    return [virtual_replicas.data_slot(r, workers, local) for r in range(n)]


def local_replica_ids(strategy) -> list[int]:
    """Global replica id of each local device, in local-device order."""
    state = runtime.runtime_of(strategy)
    ids = state.local_replica_ids
    if ids is None:
        with tf.init_scope():
            out = strategy.run(lambda: tf.distribute.get_replica_context().replica_id_in_sync_group)
            ids = [int(tf.get_static_value(x)) for x in strategy.experimental_local_results(out)]
        state.local_replica_ids = ids
    return ids
