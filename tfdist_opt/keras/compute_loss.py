"""A user's `compute_loss` override sees one device's loss values.

Keras 3's TensorFlow backend divides every loss by the replicas in sync
where it is computed (`scale_loss_for_distribution`, called by each
`keras.losses.Loss`, by the compiled loss and for `add_loss` terms), so
that the optimizer's sum of the replicas' gradients is the gradient of the
global mean. A `Model` subclass that overrides `compute_loss` and updates
a metric with the loss (Keras's own `test_metric_update_in_compute_loss`;
the pattern of the `Trainer.compute_loss` docstring) therefore tracked the
loss divided by the replicas: half the one-device value on 2 replicas,
while Keras's own "loss" log (which multiplies back) was right.

While such an override runs in a replica context, our strategies report
one replica in sync to that thread (`active()`, read by the strategies'
`num_replicas_in_sync`), so every loss it computes, `super().compute_loss()`
included, is the replica's own mean, as on one device; the value it returns
is then divided by the replicas once (`KerasSteps.compute_loss`), which is
what Keras's step and its gradient expect. A model that does not override
`compute_loss` takes Keras's path unchanged.

The one exception it creates: a loss the override already divides by the
global batch (`tf.nn.compute_average_loss(..., global_batch_size=G)`) is
divided once more; a `keras.losses.Loss`, `ops.mean`, or
`compute_average_loss` without a global batch are right.

A custom `train_step` that calls `self.compute_loss(...)` and updates a
metric with the result (keras.io's "customizing what happens in fit":
`self.loss_tracker.update_state(loss)`) tracked the loss divided by the
replicas too: the value `compute_loss` returns must stay divided, since the
step differentiates it. So each loss `compute_loss` returns in a replica
context is noted (`note_scaled`, this thread, by identity), and the model's
metrics (`model.metrics`, given `UnscaledLossUpdates` per instance by
`unscale_metric_updates`) multiply a noted loss they are updated with back
by the replicas: the one-device value, with the gradient unchanged. Only
that tensor itself: a value computed from it (`loss + penalty`) is not
recognised and is tracked divided, as under plain `MirroredStrategy`.
"""

from __future__ import annotations

import contextlib
import threading
import weakref

from tfdist_opt import _class_swap

_STATE = threading.local()


@contextlib.contextmanager
def one_replica_view(strategy):
    """Marks this thread as running a `compute_loss` override of `strategy`'s model."""
    previous = getattr(_STATE, "strategies", ())
    _STATE.strategies = (*previous, strategy)
    try:
        yield
    finally:
        _STATE.strategies = previous


def active(strategy) -> bool:
    """True inside `one_replica_view(strategy)` on this thread."""
    return any(s is strategy for s in getattr(_STATE, "strategies", ()))


def compute_loss(model, next_compute_loss, args, kwargs):
    """The model's `compute_loss` in the one-replica view, divided by the replicas.

    Args:
        model: the Keras model whose `compute_loss` runs.
        next_compute_loss: the bound `compute_loss` next in the model's
            class order after our mixin (the user's override, or Keras's).
        args: tuple. The caller's positional arguments.
        kwargs: dict. The caller's keyword arguments.

    Returns:
        What Keras's `compute_loss` returns under the strategy: the loss
        divided by the replicas in sync (None stays None).
    """
    import keras
    import tensorflow as tf

    strategy = model.distribute_strategy
    if tf.distribute.in_cross_replica_context() or strategy.num_replicas_in_sync <= 1:
        return next_compute_loss(*args, **kwargs)
    replicas = strategy.num_replicas_in_sync
    if getattr(next_compute_loss, "__func__", None) is keras.Model.compute_loss:
        return note_scaled(next_compute_loss(*args, **kwargs), replicas)
    with one_replica_view(strategy):
        loss = next_compute_loss(*args, **kwargs)
    if loss is None:
        return None
    return note_scaled(
        keras.ops.multiply(loss, keras.ops.cast(1.0 / replicas, loss.dtype)), replicas
    )


def note_scaled(loss, replicas: int):
    """Notes `loss` (this thread) as a loss divided by `replicas`; returns it."""
    if loss is None:
        return None
    noted = getattr(_STATE, "scaled", None)
    if noted is None:
        noted = _STATE.scaled = {}
    for key in [k for k, (ref, _) in noted.items() if ref() is None]:
        del noted[key]
    noted[id(loss)] = (weakref.ref(loss), replicas)
    return loss


def _unscaled(value):
    """`value` times the replicas when it is a loss `note_scaled` noted, else `value`."""
    entry = getattr(_STATE, "scaled", {}).get(id(value))
    if entry is None or entry[0]() is not value:
        return value
    import keras

    return keras.ops.multiply(value, keras.ops.cast(entry[1], value.dtype))


class UnscaledLossUpdates:
    """Metric mixin: updated with a noted divided loss, it takes the one-device value."""

    def update_state(self, *args, **kwargs):
        args = tuple(_unscaled(a) for a in args)
        kwargs = {k: _unscaled(v) for k, v in kwargs.items()}
        return super().update_state(*args, **kwargs)


def unscale_metric_updates(model) -> None:
    """Gives each of `model.metrics` `UnscaledLossUpdates` (per instance)."""
    if model.distribute_strategy.num_replicas_in_sync <= 1:
        return
    for metric in model.metrics:
        metric.__class__ = _class_swap.cached_subclass(UnscaledLossUpdates, type(metric))
