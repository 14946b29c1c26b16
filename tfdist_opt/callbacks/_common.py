"""Shared by the callbacks: role, step completion, ordering check."""

from __future__ import annotations

from tfdist_opt.strategy import topology as topology_lib
from tfdist_opt import _logging
from tfdist_opt import runtime
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


def check_fit_order(model) -> None:
    """Runs `ordering.check_order` on the callbacks `model`'s running `fit` was given.

    Keras does not tell a callback about its siblings; the model's
    per-instance `fit` (models built under a strategy from `opt_strategy()`,
    and `tfdist_opt.parameter_server.fit`) records them
    (`runtime.FitCall`). When there is no record (another model, or a
    custom training loop calling the hooks by hand), says once that the
    order was not checked, instead of skipping the check silently.
    """
    fit = runtime.FITS.get(model) if model is not None else None
    if fit is None:
        _logging.log_once(
            "tfdist_opt callbacks: the fit's callback list is not known (a "
            "model not built under opt_strategy(), or hooks called by hand), "
            "so their order was not checked (see tfdist_opt.callbacks.ordering)",
            warning=True,
        )
        return
    ordering.check_order(fit.callbacks)
