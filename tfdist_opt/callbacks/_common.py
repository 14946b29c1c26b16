"""Shared by the callbacks: role, step completion, ordering check."""

from __future__ import annotations

import inspect
import sys

from tfdist_opt.strategy import topology as topology_lib
from tfdist_opt import _logging
from tfdist_opt.callbacks import ordering
from tfdist_opt.callbacks.backup_store import atomic_write_text  # noqa: F401


def is_chief() -> bool:
    """True on the chief (or worker 0 without a chief, or with no TF_CONFIG)."""
    return topology_lib.detect_topology(gpus=()).is_chief


def task_tag() -> str:
    """`worker_1`-style name of this task (`local` without TF_CONFIG)."""
    topo = topology_lib.detect_topology(gpus=())
    if topo.task_type is None:
        return "local"
    return f"{topo.task_type}_{topo.task_index}"


def complete_step(model) -> int:
    """Blocks until the last dispatched train step has finished; returns the step.

    Keras may call `on_train_batch_end` as soon as the step is *dispatched*
    (GPU kernels are queued asynchronously). Reading `optimizer.iterations`,
    the counter the step's own `apply_gradients` increments last, copies one
    int64 to the host and cannot return before that update (and hence the
    whole step, all-reduce included) has run. It costs one scalar read.
    """
    optimizer = getattr(model, "optimizer", None)
    if optimizer is None:
        return -1
    return int(optimizer.iterations.numpy())


def _callback_list_types() -> tuple[type, ...]:
    types = []
    import keras  # pylint: disable=g-import-not-at-top

    types.append(keras.callbacks.CallbackList)
    tf_keras = sys.modules.get("tf_keras")
    if tf_keras is not None:
        types.append(tf_keras.callbacks.CallbackList)
    return tuple(types)


def _calling_callback_list():
    """The `CallbackList` (Keras 3 or tf_keras) whose hook is calling us, if any.

    Keras does not tell a callback about its siblings; the list is the
    `self` of a caller a few frames up (`inspect.currentframe`, public
    API). Used only at `on_train_begin`.
    """
    types = _callback_list_types()
    frame = inspect.currentframe()
    for _ in range(12):
        if frame is None:
            return None
        owner = frame.f_locals.get("self")
        if isinstance(owner, types):
            return owner
        frame = frame.f_back
    return None


def check_fit_order() -> None:
    """Runs `ordering.check_order` on the list `fit` was given.

    When the list cannot be found (a custom training loop calling the hooks
    by hand), says once that the order was not checked, instead of
    skipping the check silently.
    """
    cb_list = _calling_callback_list()
    if cb_list is None:
        _logging.log_once(
            "tfdist_opt callbacks: not called from a keras CallbackList, so "
            "their order was not checked (see tfdist_opt.callbacks.ordering)",
            warning=True)
        return
    ordering.check_order(cb_list.callbacks)
