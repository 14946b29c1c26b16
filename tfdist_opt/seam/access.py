"""How the package reaches TF/Keras internals: one function per use.

Every `keras.src` and `tensorflow.python` import of the package is in this
module, each inside the function that needs it (imported when called, so
importing tfdist_opt stays light). The names are listed, with the reason
no public API serves, in `tfdist_opt.seam.manifest`; the rest of the
package calls these through `tfdist_opt.private_api`.
"""

from __future__ import annotations


def tf_optimizer_class() -> type:
    """Keras 3's `TFOptimizer`, the base of every Keras 3 TF optimizer."""
    from keras.src.backend.tensorflow.optimizer import TFOptimizer

    return TFOptimizer


def reduce_per_replica(values, strategy, reduction):
    """Keras's TF trainer's reduction of a step's per-replica outputs."""
    from keras.src.backend.tensorflow import trainer as tf_trainer

    return tf_trainer.reduce_per_replica(values, strategy, reduction=reduction)


def generator_data_adapter_class() -> type:
    """Keras's `GeneratorDataAdapter` (Python-generator input)."""
    from keras.src.trainers.data_adapters import generator_data_adapter

    return generator_data_adapter.GeneratorDataAdapter


def make_class_weight_map_fn(class_weight):
    """Keras's own `class_weight` -> `sample_weight` dataset map function."""
    from keras.src.trainers.data_adapters import tf_dataset_adapter

    return tf_dataset_adapter.make_class_weight_map_fn(class_weight)


def file_exists(path) -> bool:
    """Keras's `file_utils.exists` (local and remote paths)."""
    from keras.src.utils import file_utils

    return file_utils.exists(path)


def collective_all_reduce_extended_class() -> type:
    """TF's `CollectiveAllReduceExtended` (MultiWorkerMirroredStrategy's extended)."""
    from tensorflow.python.distribute import collective_all_reduce_strategy

    return collective_all_reduce_strategy.CollectiveAllReduceExtended


def eager_context_module():
    """`tensorflow.python.eager.context` (the coordination service's store)."""
    from tensorflow.python.eager import context

    return context


def set_recv_buf_max_chunk(value: int) -> None:
    """Sets `experimental.recv_buf_max_chunk` of the server TF starts next.

    MultiWorkerMirroredStrategy copies `context.context().config` into its
    ServerDef; TF has no public setter for this field, so the eager
    context's `_config` gets it before the strategy exists.
    """
    from tensorflow.python.eager import context

    ctx = context.context()
    config = ctx.config
    config.experimental.recv_buf_max_chunk = value
    ctx._config = config  # pylint: disable=protected-access


def tf_errors_module():
    """`tensorflow.python.framework.errors`."""
    from tensorflow.python.framework import errors

    return errors


def name_scope_stack():
    """The calling thread's Keras name scope stack (a list), or None."""
    from keras.src.backend.common import global_state

    return global_state.get_global_attribute("name_scope_stack")


def set_name_scope_stack(stack) -> None:
    """Replaces the calling thread's Keras name scope stack."""
    from keras.src.backend.common import global_state

    global_state.set_global_attribute("name_scope_stack", stack)


def distributed_dataset_of(epoch_iterator):
    """The distributed dataset a Keras TF `EpochIterator` iterates, or None."""
    return getattr(epoch_iterator, "_distributed_dataset", None)


def initial_epoch(model) -> int | None:
    """The epoch a restore set for Keras's next `fit` (`Trainer._initial_epoch`)."""
    return getattr(model, "_initial_epoch", None)


def clear_epoch_length(epoch_iterator) -> None:
    """Makes a Keras `EpochIterator` run until its input ends (no known length)."""
    epoch_iterator._num_batches = None  # pylint: disable=protected-access
