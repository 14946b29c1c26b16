"""Train and eval steps for Keras 3 models under a ClusterCoordinator.

Metrics are exact under asynchronous workers: a step never updates the
shared metric variables (Keras's read-then-write `assign_add` loses updates
when two workers step at once). It returns the loss sum, the example count
and the compiled metrics' per-step state (`stateless_update_state` from
zeros); the chief adds those up and calls `stateless_result`. This assumes
additive metric state (sums and counts: Mean, accuracy, AUC, precision...),
which holds for Keras's built-in metrics.
"""

from __future__ import annotations

import weakref

import keras
import numpy as np
import tensorflow as tf

from tfdist_opt.parameter_server import locked_updates
from tfdist_opt.parameter_server import variables as variables_lib


def prepare(model: keras.Model, element_spec, build_metrics: bool = True) -> list:
    """Builds model, optimizer and metrics on the parameter servers.

    Returns the gradient targets (variables, or shards of sharded ones).

    Raises:
        ValueError: the model is not compiled, or was not created in a
            parameter-server strategy's scope.
    """
    strategy = model.distribute_strategy
    if not isinstance(strategy, tf.distribute.ParameterServerStrategy):
        raise ValueError(
            "Invalid value for `model`: parameter-server training needs the model "
            "created and compiled inside `strategy.scope()` of a parameter-server "
            f"strategy. Received: a model under {type(strategy).__name__}."
        )
    if not getattr(model, "compiled", False) or model.optimizer is None:
        raise ValueError(
            "Invalid value for `model`: call `model.compile(optimizer, "
            "loss, ...)` inside `strategy.scope()` before training. "
            "Received: an uncompiled model."
        )
    optimizer = model.optimizer
    if "/job:ps/" not in variables_lib.raw(optimizer.iterations).device:
        raise ValueError(
            "Invalid value for `model.optimizer`: its variables are not on a "
            "parameter server (device "
            f"{variables_lib.raw(optimizer.iterations).device!r}); create the "
            "optimizer (or compile with its name) inside `strategy.scope()`."
        )
    if optimizer.gradient_accumulation_steps:
        raise ValueError(
            "Invalid value for `gradient_accumulation_steps` with parameter-server "
            "training: asynchronous workers update the variables one step at a time. "
            f"Received: gradient_accumulation_steps={optimizer.gradient_accumulation_steps}."
            " Expected None (use a larger batch per step instead)."
        )
    data_spec = element_spec
    x_spec = keras.utils.unpack_x_y_sample_weight(data_spec)[0]
    with strategy.scope():
        if not model.built or not all(layer.built for layer in model._flatten_layers()):
            model(tf.nest.map_structure(lambda s: keras.KerasTensor(s.shape, s.dtype.name), x_spec))
        targets = variables_lib.gradient_targets(model.trainable_variables)
        if not optimizer.built:
            optimizer.build(targets)
        if build_metrics:
            # Compiled metrics and losses, symbolically (no step runs).
            model._symbolic_build(data_batch=data_spec)
    variables_lib.make_counter_atomic(optimizer.iterations)
    locked_updates.lock_adam_updates(optimizer)
    variables_lib.route_sharded_lookups(model)
    variables_lib.make_sharded_savable(model.variables)
    return targets


def compiled_metrics(model: keras.Model):
    """The `CompileMetrics` object of a compiled model, or None."""
    return getattr(model, "_compile_metrics", None)


def _zero_state(metrics):
    return [tf.zeros(v.shape, v.dtype) for v in metrics.variables] if metrics else []


def _batch_size(x) -> tf.Tensor:
    leaf = next(t for t in tf.nest.flatten(x) if t is not None)
    return tf.cast(tf.shape(leaf)[0], tf.float32)


def make_train_function(model: keras.Model, targets: list, steps_per_execution: int = 1):
    """A tf.function `(per_worker_iterator) -> (loss_sum, count, metric_state)`."""
    strategy = model.distribute_strategy
    optimizer = model.optimizer
    metrics = compiled_metrics(model)

    def replica_step(data):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        with tf.GradientTape() as tape:
            y_pred = model(x, training=True)
            loss = model.compute_loss(
                x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True
            )
            scaled = optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, targets)
        optimizer.apply(grads, targets)
        state = (
            metrics.stateless_update_state(_zero_state(metrics), y, y_pred, sample_weight)
            if metrics
            else []
        )
        n = _batch_size(x)
        return tf.cast(loss, tf.float32) * n, n, state

    def one_step(iterator):
        out = strategy.run(replica_step, args=(next(iterator),))
        return _sum_local(strategy, out)

    @tf.function
    def train_function(iterator):
        acc = one_step(iterator)
        for _ in tf.range(steps_per_execution - 1):
            acc = tf.nest.map_structure(tf.add, acc, one_step(iterator))
        return acc

    return train_function


_EVAL_FUNCTIONS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def make_eval_function(model: keras.Model):
    """A tf.function `(batch) -> (loss_sum, count, metric_state)`, run on the chief.

    One per model (cached), so per-epoch validation traces once.
    """
    if model in _EVAL_FUNCTIONS:
        return _EVAL_FUNCTIONS[model]
    metrics = compiled_metrics(model)

    @tf.function
    def eval_function(data):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        y_pred = model(x, training=False)
        loss = model.compute_loss(
            x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=False
        )
        state = (
            metrics.stateless_update_state(_zero_state(metrics), y, y_pred, sample_weight)
            if metrics
            else []
        )
        n = _batch_size(x)
        return tf.cast(loss, tf.float32) * n, n, state

    _EVAL_FUNCTIONS[model] = eval_function
    return eval_function


def _sum_local(strategy, out):
    local = strategy.experimental_local_results(out)
    if len(local) == 1:
        return local[0]
    return tf.nest.map_structure(lambda *v: tf.add_n(list(v)), *local)


class Totals:
    """Adds up step outputs on the chief and turns them into Keras logs."""

    def __init__(self, model: keras.Model):
        self._metrics = compiled_metrics(model)
        self.reset()

    def reset(self):
        self.loss_sum = 0.0
        self.count = 0.0
        self.state = None
        self.steps = 0
        self.lost = 0  # steps whose outputs died with their worker

    def add(self, loss_sum, count, state):
        self.loss_sum += float(loss_sum)
        self.count += float(count)
        state = [np.asarray(s) for s in state]
        self.state = state if self.state is None else [a + b for a, b in zip(self.state, state)]
        self.steps += 1

    def logs(self, prefix: str = "") -> dict[str, float]:
        out = {"loss": self.loss_sum / self.count if self.count else float("nan")}
        if self._metrics is not None and self.state:
            result = self._metrics.stateless_result(self.state)
            for name, value in result.items() if isinstance(result, dict) else ():
                out[name] = float(np.asarray(value))
        return {prefix + k: v for k, v in out.items()}
