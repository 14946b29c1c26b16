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
`tf.reduce_mean(local_results, axis=0)` gives on a single host). Its two
dataset-distributing methods also make each worker's pipeline count its
batches for the stall inspector (`tfdist_opt.stall`). Everything else is
the upstream strategy. tf_keras (`TF_USE_LEGACY_KERAS=1`) never
passes such arguments and is unaffected.
"""

from __future__ import annotations

import contextlib

import tensorflow as tf

from tfdist_opt.stall import keras_binding as stall_binding
from tfdist_opt.strategy import chief_saving


def _rank(value) -> int | None:
    if isinstance(value, tf.distribute.DistributedValues):
        value = value.values[0]
    shape = getattr(value, "shape", None)
    return None if shape is None else shape.rank


class KerasMultiWorkerMirroredStrategy(tf.distribute.MultiWorkerMirroredStrategy):
    """`MultiWorkerMirroredStrategy` whose `reduce` accepts what Keras 3 sends.

    Construct it exactly like `tf.distribute.MultiWorkerMirroredStrategy`
    (normally through `tfdist_opt.opt_strategy()`).
    """

    @contextlib.contextmanager
    def scope(self):
        """The upstream scope; Keras models built in it save storage-aware.

        On entry and exit, every Keras model whose `_distribute_strategy` is
        this strategy gets the `chief_saving` subclass (issues 17, 23): one
        worker per shared storage writes `model.save` / `save_weights` /
        `ModelCheckpoint` paths, and a worker on its own disk its own copy.
        Keras's `fit` enters this scope too, so a model built and fitted in
        one block is covered before its first callback runs. The scan runs
        only when a variable or Keras object was created since the last one.
        """
        chief_saving.adopt_models(self)
        try:
            with super().scope(), tf.variable_creator_scope(chief_saving.count_variable):
                yield self
        finally:
            chief_saving.adopt_models(self)

    def experimental_distribute_dataset(self, dataset, options=None):
        """The upstream method; each worker's pipeline also counts its batches.

        The count tells the stall inspector that a worker still waits for
        its own input (`tfdist_opt.stall.keras_binding.count_inputs`): TF's
        iterator agrees across workers on every batch in a collective, so
        a worker waiting for a peer's input looks the same from outside.
        """
        return stall_binding.count_inputs(
            self, super().experimental_distribute_dataset(dataset, options))

    def distribute_datasets_from_function(self, dataset_fn, options=None):
        """The upstream method; counted like `experimental_distribute_dataset`."""
        return stall_binding.count_inputs(
            self, super().distribute_datasets_from_function(dataset_fn, options))

    def reduce(self, reduce_op, value, axis=None):
        # keras-team/keras#20585: Keras 3 passes nests (fix 1) and axis=0 for
        # scalars (fix 2); see the module docstring.
        if not tf.nest.is_nested(value):
            if axis is not None and _rank(value) == 0:
                axis = None
            return super().reduce(reduce_op, value, axis=axis)
        return tf.nest.map_structure(
            lambda v: self.reduce(reduce_op, v, axis=axis), value)
