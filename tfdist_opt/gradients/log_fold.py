"""Keras's logged values summed in the step's gradient collective.

Under our multi-worker strategy a Keras 3 `fit` step runs its gradient
collectives (PowerSGD: the P factors with the dense rest, then the Q
factors; uncompressed: the packs), then reduces its logs across workers in
one more collective (`tfdist_opt.strategy.log_packing`). A collective
costs its latency however small, and each is one more point where a
worker waits for the slowest one (the figures: docs/benchmarks.md,
"Figures behind the gradient path's design").

Keras's `train_step` (keras/src/backend/tensorflow/trainer.py) updates
the compiled metrics and reads every metric's result *after*
`apply_gradients`, so the logs do not exist yet when the gradients cross.
`train_step(model)` is that method with `compute_metrics` moved before
`apply_gradients` and nothing else changed: the metric updates read only
`y`, `y_pred` and `sample_weight`, which the forward pass has already
made, and nothing in `apply_gradients` touches a metric variable, so every
logged value is the same number. The step then `offer`s its rank-0 float32
log values; the gradient all-reduce `take`s them and sums them in its last
collective (the Q factors' with PowerSGD, a float32 pack otherwise), then
`answer`s the sums; the strategy's `reduce` of the logs returns
`sum / num_replicas`, the expression upstream's MEAN uses
(`CollectiveAllReduce._all_reduce`: `v / group_size`). With 2 workers the
sums are bit for bit those of upstream's path (one addition per element).

Where it applies (`eligible`): our multi-worker strategy with one replica
per worker, Keras's own `train_step` and `compute_metrics` (not
overridden), no per-replica XLA step and no inlined `steps_per_execution`
loop, an optimizer with our gradient hooks that all-reduces every step
(`grad_accum == 1`, no sharded state) and sends float32 (`compression`
`"none"` or PowerSGD with `powersgd_wire="none"`) or streamed pieces
(`collective_streams`: the logs travel uncast beside bf16/fp16
gradients). Anything else, or a
value offered but not taken, takes the packed logs' collective as before.
"""

from __future__ import annotations

import warnings

import tensorflow as tf

from tfdist_opt import private_api
from tfdist_opt import runtime


def eligible(model, optimizer_folds) -> bool:
    """Whether `model`'s train step may carry its logs in a gradient pack.

    Args:
        model: a Keras 3 model under our strategy.
        optimizer_folds: Callable. `optimizer -> bool`: whether its gradient
            hooks sum offered logs (`hooks.can_fold_logs`).
    """
    strategy = model.distribute_strategy
    if (
        model.run_eagerly
        or not getattr(strategy, "_fold_logs", False)
        or not getattr(strategy, "_pack_log_reductions", False)
    ):
        return False
    if len(strategy.extended.worker_devices) != 1 or strategy.num_replicas_in_sync < 2:
        return False
    cls = type(model)
    train_step_code, compute_metrics_code = private_api.keras_train_step_code()
    if (
        getattr(cls.train_step, "__code__", None) is not train_step_code
        or getattr(cls.compute_metrics, "__code__", None) is not compute_metrics_code
    ):
        return False
    return model.optimizer is not None and optimizer_folds(model.optimizer)


def train_step(model):
    """Keras's `train_step` with the metrics computed before the update."""
    import keras  # pylint: disable=g-import-not-at-top

    def step(data):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        with tf.GradientTape() as tape:
            if model._call_has_training_arg:  # pylint: disable=protected-access
                y_pred = model(x, training=True)
            else:
                y_pred = model(x)
            loss = model._compute_loss(  # pylint: disable=protected-access
                x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True
            )
            model._loss_tracker.update_state(  # pylint: disable=protected-access
                private_api.unscale_loss_for_distribution(loss),
                sample_weight=tf.shape(next(i for i in keras.tree.flatten(x) if i is not None))[0],
            )
            if model.optimizer is not None:
                loss = model.optimizer.scale_loss(loss)
        # Upstream computes these after apply_gradients; they read only
        # y, y_pred and sample_weight (see the module docstring).
        logs = model.compute_metrics(x, y, y_pred, sample_weight=sample_weight)
        if model.trainable_weights:
            trainable_weights = model.trainable_weights
            gradients = tape.gradient(loss, trainable_weights)
            strategy = model.distribute_strategy
            offer(strategy, logs)
            try:
                model.optimizer.apply_gradients(zip(gradients, trainable_weights))
            finally:
                take(strategy)  # not taken: the logs' own collective
        else:
            warnings.warn("The model does not have any trainable weights.")
        return logs

    return step


def offer(strategy, logs) -> None:
    """Offers the rank-0 float32 values of `logs` to the next gradient pack."""
    leaves = [
        v
        for v in tf.nest.flatten(logs)
        if isinstance(v, tf.Tensor) and v.shape.rank == 0 and v.dtype == tf.float32
    ]
    runtime.runtime_of(strategy).log_offer = leaves or None


def take(strategy) -> list | None:
    """The offered log values (once), or None."""
    state = runtime.runtime_of(strategy)
    leaves, state.log_offer = state.log_offer, None
    return leaves


def answer(strategy, leaves, sums) -> None:
    """Records the cross-replica SUM of each taken log value."""
    packer = getattr(strategy, "_log_packer", None)
    if packer is None:
        raise ValueError(
            "Invalid value for `strategy`: expected a strategy "
            "whose logs are packed (KerasMultiWorkerMirrored"
            f"Strategy). Received: strategy={strategy!r}"
        )
    for leaf, total in zip(leaves, sums):
        packer.preset(leaf, total, strategy.num_replicas_in_sync)
