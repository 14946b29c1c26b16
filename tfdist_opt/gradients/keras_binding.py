"""Wires the gradient path into Keras 3 with no change to user code.

`attach(strategy, options)` stores a `GradientOptions` on the strategy and
installs, once per process, three method overrides on Keras 3's
`keras.src.backend.tensorflow.optimizer.TFOptimizer` (the base of every
Keras 3 optimizer on the TF backend). Each override looks up the options on
the optimizer's own strategy (`optimizer._distribution_strategy`, captured
by Keras when the optimizer is created in `strategy.scope()`) and calls the
upstream method unchanged when there are none, so strategies not built by
`opt_strategy` (and `LossScaleOptimizer` itself, which delegates to its
inner optimizer) behave exactly as upstream.

Overrides (all private Keras methods; Keras has no public hook for the
all-reduce or for accumulation under tf.distribute):

* `_all_reduce_sum_gradients`: compression + packing
  (`allreduce.all_reduce_sum`) in place of one plain
  `ReplicaContext.all_reduce`. Upstream: keras-team/keras#17429 asks for a
  gradient-aggregation hook (tf_keras had `gradient_aggregator`).
* `build`: also creates the accumulation state (`grad_accum > 1`) and runs
  the pack-size autotune (`bytes_per_pack="auto"`, multi-worker).
* `apply`: with `grad_accum > 1`, `accumulation.accumulate_and_apply`
  instead of Keras's `_backend_apply_gradients`, whose
  `gradient_accumulation_steps` branch fails under tf.distribute
  (FACTS.md 2; keras-team/keras#17429, tf-keras#107).

Checked against Keras 3.15; `install()` raises if the methods are gone.
tf_keras (`TF_USE_LEGACY_KERAS=1`) is not hooked: its optimizers reduce
through `tf.distribute` as usual, without compression or accumulation.
"""

from __future__ import annotations

import sys
import threading

from absl import logging
import tensorflow as tf

from tfdist_opt.gradients import accumulation
from tfdist_opt.gradients import allreduce
from tfdist_opt.gradients import contract
from tfdist_opt.gradients.options import GradientOptions

OPTIONS_ATTR = "_tfdist_gradient_options"
_LOCK = threading.Lock()
_ORIGINAL: dict = {}


def attach(strategy: tf.distribute.Strategy, options: GradientOptions
           ) -> tf.distribute.Strategy:
    """Makes Keras 3 optimizers created in `strategy.scope()` use `options`.

    Args:
        strategy: a `tf.distribute.Strategy`.
        options: `GradientOptions`. When `options.is_default` nothing is
            installed.

    Returns:
        `strategy` (for chaining).

    Example:
        >>> strategy = attach(tf.distribute.MirroredStrategy(),  # doctest: +SKIP
        ...                   GradientOptions(grad_accum=4, compression="bf16"))
    """
    detach(strategy)  # re-attaching replaces, never stacks
    setattr(strategy, OPTIONS_ATTR, options)
    if options.is_default:
        return strategy
    install()
    if options.grad_accum > 1:
        _wrap_distribute_dataset(strategy, options.grad_accum)
    return strategy


def detach(strategy: tf.distribute.Strategy) -> tf.distribute.Strategy:
    """Undoes `attach`: upstream Keras behaviour for this strategy's optimizers."""
    if hasattr(strategy, OPTIONS_ATTR):
        delattr(strategy, OPTIONS_ATTR)
    # The batch-contract check lives on the instance; drop it if present.
    vars(strategy).pop("experimental_distribute_dataset", None)
    return strategy


def options_of(strategy) -> GradientOptions | None:
    """The `GradientOptions` attached to `strategy`, if any."""
    return getattr(strategy, OPTIONS_ATTR, None)


def install() -> None:
    """Installs the three `TFOptimizer` overrides (idempotent)."""
    with _LOCK:
        if _ORIGINAL:
            return
        from keras.src.backend.tensorflow.optimizer import TFOptimizer

        for name in ("_all_reduce_sum_gradients", "build", "apply"):
            if not callable(getattr(TFOptimizer, name, None)):
                raise RuntimeError(
                    f"tfdist_opt cannot hook Keras: TFOptimizer.{name} is "
                    "missing in this Keras version (checked on 3.15).")
        _ORIGINAL["_all_reduce_sum_gradients"] = TFOptimizer._all_reduce_sum_gradients
        _ORIGINAL["build"] = TFOptimizer.build
        _ORIGINAL["apply"] = TFOptimizer.apply
        TFOptimizer._all_reduce_sum_gradients = _all_reduce_sum_gradients
        TFOptimizer.build = _build
        TFOptimizer.apply = _apply


def _options_for(optimizer) -> GradientOptions | None:
    from keras.src.optimizers.loss_scale_optimizer import LossScaleOptimizer

    if isinstance(optimizer, LossScaleOptimizer):
        return None  # it delegates to its inner optimizer, which is hooked
    options = options_of(getattr(optimizer, "_distribution_strategy", None))
    return None if options is None or options.is_default else options


def _all_reduce_sum_gradients(self, grads_and_vars):
    options = _options_for(self)
    if options is None or tf.distribute.get_replica_context() is None:
        return _ORIGINAL["_all_reduce_sum_gradients"](self, grads_and_vars)
    grads_and_vars = list(grads_and_vars)
    grads = [g for g, _ in grads_and_vars]
    reduced = allreduce.all_reduce_sum(grads, options,
                                       self._distribution_strategy)
    return [(r, v) for r, (_, v) in zip(reduced, grads_and_vars)]


def _build(self, variables):
    _ORIGINAL["build"](self, variables)
    options = _options_for(self)
    if options is None:
        return
    if options.grad_accum > 1:
        accumulation.create_state(self, self._trainable_variables,
                                  options.grad_accum)
    if options.bytes_per_pack == "auto" and options.autotune:
        from tfdist_opt.gradients import autotune

        autotune.maybe_tune_for_variables(self._distribution_strategy,
                                          self._trainable_variables, options)


def _apply(self, grads, trainable_variables=None):
    options = _options_for(self)
    if options is None or options.grad_accum == 1:
        return _ORIGINAL["apply"](self, grads, trainable_variables)
    if len(grads) == 0:
        return None
    if trainable_variables is None:
        trainable_variables = self._trainable_variables
    else:
        trainable_variables = list(trainable_variables)
        if not self.built:
            from keras.src import backend

            with backend.name_scope(self.name, caller=self):
                self.build(trainable_variables)
            self.built = True
        self._check_variables_are_known(trainable_variables)
    from keras.src import backend

    with backend.name_scope(self.name, caller=self):
        grads, trainable_variables = self._filter_empty_gradients(
            grads, trainable_variables)
        if any(self._overwrite_variable_with_gradient(v)
               for v in trainable_variables):
            raise NotImplementedError(
                "tfdist_opt grad_accum does not support variables with "
                "`overwrite_with_gradient=True`. Expected grad_accum=1.")
        scale = self.loss_scale_factor
        if scale is not None:
            grads = [g if g is None else g / scale for g in grads]
        applied = accumulation.accumulate_and_apply(
            self, list(grads), trainable_variables, options)
        for variable in trainable_variables:
            if variable.constraint is not None:
                variable.assign(variable.constraint(variable))
    return applied


def _wrap_distribute_dataset(strategy, k: int) -> None:
    """Checks the batch contract when `fit` distributes the dataset."""
    original = strategy.experimental_distribute_dataset

    def experimental_distribute_dataset(dataset, options=None):
        fit = _calling_fit()
        if fit is not None:
            try:
                card = int(dataset.cardinality())
            except (AttributeError, TypeError, ValueError):
                card = -1
            steps = fit.get("steps_per_epoch") or (card if card >= 0 else None)
            line = contract.check_updates_per_fit(
                k, steps, int(fit.get("epochs") or 1),
                int(fit.get("initial_epoch") or 0))
            if line:
                logging.warning(line)
        batch = _static_batch(dataset)
        if batch is not None:
            n = strategy.num_replicas_in_sync
            micro = contract.micro_batch_from_dataset(batch, k, n)
            logging.info(
                "tfdist_opt grad_accum: dataset batch %d = micro %d x %d "
                "replicas per step; effective global batch micro x k x "
                "replicas = %d x %d x %d = %d", batch, micro, n, micro, k, n,
                contract.effective_batch_size(micro, k, n))
        return original(dataset, options)

    strategy.experimental_distribute_dataset = experimental_distribute_dataset


def _calling_fit() -> dict | None:
    """`fit`'s arguments when a Keras `fit` (not evaluate / predict) is
    distributing its training data; None otherwise.

    Keras gives the strategy no hint which call distributes a dataset, so
    the caller's frames are inspected (a few levels, first match wins).
    """
    frame = sys._getframe(2)  # pylint: disable=protected-access
    for _ in range(12):
        if frame is None:
            return None
        name = frame.f_code.co_name
        owner = frame.f_locals.get("self")
        if name in ("fit", "evaluate", "predict") and hasattr(owner, "train_function"):
            if name != "fit":
                return None
            loc = frame.f_locals
            return {"epochs": loc.get("epochs"),
                    "initial_epoch": getattr(owner, "_initial_epoch", None)
                    or loc.get("initial_epoch"),
                    "steps_per_epoch": loc.get("steps_per_epoch")}
        frame = frame.f_back
    return None


def _static_batch(dataset) -> int | None:
    try:
        spec = tf.nest.flatten(dataset.element_spec)[0]
        return spec.shape[0] if spec.shape.rank else None
    except (AttributeError, TypeError, IndexError):
        return None
