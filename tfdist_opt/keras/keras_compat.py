"""The few, documented fixes that make Keras 3 train under tf.distribute.

Keras 3 (TF >= 2.16) cannot `fit` under a plain
`tf.distribute.MultiWorkerMirroredStrategy` (keras-team/keras#20585,
tensorflow/tensorflow#72388). Two calls in
`keras/src/backend/tensorflow/trainer.py` reach `Strategy.reduce` with
arguments MWMS's cross-device ops do not accept:

1. `_maybe_symbolic_build` reduces the first *nest* of PerReplica batches
   (`(x, y)` or a dict) with `axis=None`; MWMS hands the whole tuple to the
   collective and raises "Attempt to convert a value (PerReplica...)".
2. `reduce_per_replica` reduces every per-replica output, scalar metric
   values included, with `strategy.reduce("MEAN", v, axis=0)`; a rank-0
   value has no axis 0 ("Invalid reduction dimension 0 for input with 0
   dimensions").

`KerasMultiWorkerMirroredStrategy.reduce` maps over the nest and reduces a
rank-0 value across replicas without an axis (the same number
`tf.reduce_mean(local_results, axis=0)` gives on a single host).

3. `predict` concatenates every replica's outputs with `strategy.gather`
   (`_multi_worker_concat`); TF's collective gather has no bfloat16 kernel,
   so a `mixed_bfloat16` model's `predict` raised "DataType bfloat16 not in
   list of allowed values". `gather` carries bfloat16 as float32 (exact:
   every bfloat16 is a float32) and casts back.

4. `reduce_per_replica` reduces a metric's `result()` even when it is not a
   per-replica value: a Keras metric returning its own variable (keras.io's
   `BinaryTruePositives`) raised "Cannot convert input_tensor to a
   PerReplica object because it doesn't have device set". Keras on one
   host returns such a value unreduced, read where the variable's
   aggregation (SUM over every replica) applies; `reduce` reads it so.

Two changes make metrics read as on one device (`tfdist_opt.strategy.
metric_logs`, `tfdist_opt.keras.compute_loss`): `num_replicas_in_sync`
reads 1 to the thread running a model's `compute_loss` override, and
`reduce` answers the mean of a log value every replica holds equal (each
step's metrics, computed from the all-reduced metric state) with the local
value, without a collective.

One change is for speed, not correctness: `run` remembers its outputs so
that `reduce` sends every scalar Keras logs in one collective instead of one
each (`log_packing`), with the same values.

Its two dataset-distributing methods also make each worker's pipeline count
its batches for the stall inspector (`tfdist_opt.stall`).

Everything else is the upstream strategy. tf_keras (`TF_USE_LEGACY_KERAS=1`)
never passes such arguments and is unaffected.

Models built in the scope of any strategy `opt_strategy()` returns
(`KerasOneDeviceStrategy`, `KerasMirroredStrategy`, this one) get the
`keras_steps.KerasSteps` step functions (XLA per replica, generator input);
under this one also storage-aware saving (`chief_saving`).
"""

from __future__ import annotations

import contextlib

import tensorflow as tf

from tfdist_opt import _class_swap
from tfdist_opt.stall import keras_binding as stall_binding
from tfdist_opt.strategy.saving import chief_saving
from tfdist_opt.keras import compute_loss
from tfdist_opt.keras import first_batch
from tfdist_opt.keras import global_batch
from tfdist_opt.keras import keras_steps
from tfdist_opt.keras import log_packing
from tfdist_opt.keras import metric_logs
from tfdist_opt.keras import model_registry
from tfdist_opt.keras import plain_iterator
from tfdist_opt.keras import replica_initial_values
from tfdist_opt.keras import scalar_variables
from tfdist_opt.strategy.devices import worker_cpu_replicas

# Gathered as float32 by `gather` (fix 3): no collective gather kernel.
_GATHER_AS_FLOAT32 = (tf.bfloat16,)


class _MultiWorkerModel(keras_steps.KerasSteps, chief_saving.ChiefSaving):
    """Both mixins a model built under our multi-worker strategy gets."""


class _AdoptingScope:
    """Strategy mixin: models built in `scope()` get `_MODEL_MIXIN`.

    Scalar variables created in the scope convert with `int()`/`float()`
    (`scalar_variables`). Models built and trained inside one scope entry get it when Keras
    distributes their input (`experimental_distribute_dataset`), before
    the model is built from its first batch. Its `reduce` answers that
    first-batch reduce with one replica's batch (`first_batch`).
    """

    _MODEL_MIXIN: type = keras_steps.KerasSteps

    @contextlib.contextmanager
    def scope(self):
        chief_saving.adopt_models(self, self._MODEL_MIXIN)
        try:
            with (
                super().scope(),
                tf.variable_creator_scope(scalar_variables.creator),
                model_registry.recording(),
            ):
                yield self
        finally:
            chief_saving.adopt_models(self, self._MODEL_MIXIN)

    def experimental_distribute_dataset(self, dataset, options=None):
        # Keras's fit/evaluate/predict distribute their input before they
        # build the model: a model built and trained inside one scope entry
        # gets `_MODEL_MIXIN` here, before its first batch is pulled.
        chief_saving.adopt_models(self, self._MODEL_MIXIN)
        distributed = super().experimental_distribute_dataset(dataset, options)
        # A model Keras first builds in this fit reduces the first batch
        # before it gets `_MODEL_MIXIN` (`first_batch.arm`).
        first_batch.arm(self, distributed)
        return distributed

    @property
    def num_replicas_in_sync(self):
        # Keras divides every loss by this where it is computed; a model's
        # `compute_loss` override sees 1 on its thread, and so one device's
        # loss values (a metric it updates with them too); Keras's step
        # gets the result divided once (`compute_loss`).
        if compute_loss.active(self):
            return 1
        return super().num_replicas_in_sync

    def reduce(self, reduce_op, value, axis=None):
        # The first batch Keras builds a model from: one replica's, not a
        # mean (`first_batch`; uneven batches, strings).
        if axis is None and (
            first_batch.active() or first_batch.take_armed(self, reduce_op, value)
        ):
            return first_batch.local_batch(self, value)
        return super().reduce(reduce_op, value, axis=axis)


class KerasOneDeviceStrategy(_AdoptingScope, tf.distribute.OneDeviceStrategy):
    """`OneDeviceStrategy` whose models get `keras_steps.KerasSteps`."""


class KerasMirroredStrategy(_AdoptingScope, tf.distribute.MirroredStrategy):
    """`MirroredStrategy` whose models get `keras_steps.KerasSteps`.

    Construct it exactly like `tf.distribute.MirroredStrategy`. A variable
    first created inside an XLA-compiled `tf.function` (a model without an
    `Input` in `predict` with `jit_compile=True`) initializes on every
    replica as on one device (`replica_initial_values`).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.extended.__class__ = _class_swap.cached_subclass(
            replica_initial_values.LiftableInitialValues, type(self.extended)
        )


def _rank(value) -> int | None:
    if isinstance(value, tf.distribute.DistributedValues):
        value = value.values[0]
    if isinstance(value, (int, float)):
        # Keras 3.10-3.12 with run_eagerly=True log Python floats.
        return 0
    shape = getattr(value, "shape", None)
    if shape is None:
        return None
    return len(shape) if isinstance(shape, tuple) else shape.rank


def _is_keras_variable(value) -> bool:
    import keras

    return isinstance(value, keras.Variable)


class KerasMultiWorkerMirroredStrategy(_AdoptingScope, tf.distribute.MultiWorkerMirroredStrategy):
    """`MultiWorkerMirroredStrategy` whose `reduce` and `gather` accept what Keras 3 sends.

    Construct it exactly like `tf.distribute.MultiWorkerMirroredStrategy`
    (normally through `tfdist_opt.opt_strategy()`).

    Its `scope()` is the upstream scope; on entry and exit, every Keras model
    whose `_distribute_strategy` is this strategy gets the `chief_saving`
    subclass (issues 17, 23): one worker per shared storage writes
    `model.save` / `save_weights` / `ModelCheckpoint` paths, and a worker on
    its own disk its own copy; the same subclass carries
    `keras_steps.KerasSteps`. The models are those Keras built or called
    while the scope was entered (`model_registry`); Keras's `fit` enters
    this scope too, so a model first built by `fit` is covered before its
    train function is made.
    """

    _MODEL_MIXIN = _MultiWorkerModel

    def __init__(
        self, cluster_resolver=None, communication_options=None, local_cpu_replicas: int = 0
    ):
        """Like `tf.distribute.MultiWorkerMirroredStrategy`'s constructor.

        Args:
            cluster_resolver: as upstream.
            communication_options: as upstream.
            local_cpu_replicas: int. On a host without GPUs, run this many
                replicas per worker on the logical CPU devices `CPU:0 ..`
                (`StrategyConfig.replicas`; `worker_cpu_replicas`). `0` or
                `1`: TF's choice (one CPU replica).
        """
        if local_cpu_replicas <= 1:
            super().__init__(
                cluster_resolver=cluster_resolver, communication_options=communication_options
            )
            return
        options = (
            communication_options
            if communication_options is not None
            else tf.distribute.experimental.CommunicationOptions()
        )
        # The upstream constructor builds TF's extended object itself (then
        # only records usage gauges): build ours, with L CPU devices.
        tf.distribute.Strategy.__init__(
            self, worker_cpu_replicas.extended(self, cluster_resolver, options, local_cpu_replicas)
        )

    def run(self, fn, args=(), kwargs=None, options=None):
        """The upstream `run`; its scalar outputs are then reduced packed.

        See `log_packing`: Keras reduces each logged value with its own
        collective; the first reduce of one of these outputs reduces all of
        them in one.
        """
        outputs = super().run(fn, args=args, kwargs=kwargs, options=options)
        if self._pack_log_reductions:
            self._log_packer.remember(outputs)
        return outputs

    @property
    def _log_packer(self):
        packer = self.__dict__.get("_log_packer_instance")
        if packer is None:
            upstream = super().reduce
            packer = log_packing.LogPacker(lambda op, value: upstream(op, value, axis=None))
            self.__dict__["_log_packer_instance"] = packer
        return packer

    # Off only to compare with the one-collective-per-value path in tests.
    _pack_log_reductions = True

    def experimental_distribute_dataset(self, dataset, options=None):
        """The upstream method; each worker's pipeline also counts its batches.

        The count tells the stall inspector that a worker still waits for
        its own input (`tfdist_opt.stall.settings.count_inputs`): TF's
        iterator agrees across workers on every batch in a collective, so
        a worker waiting for a peer's input looks the same from outside.

        With one CPU replica per worker its iterators are plain `tf.data`
        iterators, not TF's MultiDeviceIterator (`plain_iterator`).
        """
        if global_batch.per_worker_batch(self, dataset) is not None:
            # Per-worker data (auto-sharding OFF): each worker's batch is
            # its share of the global batch, as TF defines it, split over
            # the worker's own replicas.
            return self.distribute_datasets_from_function(
                global_batch.per_worker_dataset_fn(self, dataset), options
            )
        return stall_binding.count_inputs(
            self,
            plain_iterator.apply(self, super().experimental_distribute_dataset(dataset, options)),
        )

    def distribute_datasets_from_function(self, dataset_fn, options=None):
        """The upstream method; counted and iterated like `experimental_distribute_dataset`."""
        return stall_binding.count_inputs(
            self,
            plain_iterator.apply(
                self, super().distribute_datasets_from_function(dataset_fn, options)
            ),
        )

    def reduce(self, reduce_op, value, axis=None):
        # The first batch of a model Keras first builds in this fit, before
        # it has `_MODEL_MIXIN`: one replica's, on every worker alike.
        if axis is None and first_batch.take_armed(self, reduce_op, value, only_unaddable=False):
            return first_batch.local_batch(self, value)
        # keras-team/keras#20585: Keras 3 passes nests (fix 1) and axis=0 for
        # scalars (fix 2); see the module docstring.
        if not tf.nest.is_nested(value):
            if _is_keras_variable(value):
                # Fix 4 (module docstring): a metric's `result()` returned
                # its variable. Read it as Keras does on one host (outside
                # any replica: its own aggregation over every replica).
                return tf.identity(value.value)
            if axis is not None and _rank(value) == 0:
                axis = None
            if (
                axis is None
                and log_packing.op_name(reduce_op) == "MEAN"
                and metric_logs.replica_equal(value)
            ):
                # Every replica logged the same metric values, computed
                # from the all-reduced metric state (`metric_logs`): the
                # mean is any replica's value, with no second collective.
                return (
                    value.values[0] if isinstance(value, tf.distribute.DistributedValues) else value
                )
            if axis is None and self._pack_log_reductions:
                packed = self._log_packer.lookup(reduce_op, value)
                if packed is not None:
                    return packed
            return super().reduce(reduce_op, value, axis=axis)
        return tf.nest.map_structure(lambda v: self.reduce(reduce_op, v, axis=axis), value)

    def gather(self, value, axis):
        # Fix 3 (module docstring): Keras's predict gathers bfloat16 outputs.
        def one(v):
            dtype = (v.values[0] if isinstance(v, tf.distribute.DistributedValues) else v).dtype
            if dtype not in _GATHER_AS_FLOAT32:
                return super(KerasMultiWorkerMirroredStrategy, self).gather(v, axis)
            as_float = self.run(lambda t: tf.cast(t, tf.float32), args=(v,))
            return tf.cast(
                super(KerasMultiWorkerMirroredStrategy, self).gather(as_float, axis), dtype
            )

        return tf.nest.map_structure(one, value)
