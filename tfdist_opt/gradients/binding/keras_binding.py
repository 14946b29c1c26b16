"""Wires the gradient path into Keras 3 with no change to user code.

`attach(strategy, plan)` (a `gradient_plan.GradientPlan`, or the
`GradientOptions` it is made from) gives this one strategy *instance* a
`GradientBinding` (in its `runtime.StrategyRuntime`) and wraps its `scope()` (an instance attribute; the class
and every other strategy are untouched). Inside the wrapped scope a
`tf.variable_creator_scope` watches variable creation: Keras creates an
optimizer's first variable (`iteration`) in `BaseOptimizer.__init__`, under
`backend.name_scope(self.name, caller=self)`, which names the optimizer.
That optimizer, if its `_distribution_strategy` is (or is about to be) this
strategy, is hooked there and then (`hooks.hook`: its class is swapped for
a cached subclass with the gradient overrides) and keeps this binding's
options for its lifetime. So exactly the Keras 3 optimizers created in
`opt_strategy().scope()` (also by `model.compile("sgd")` or `load_model`
in the scope) get packing, compression and accumulation; a plain
`tf.distribute.MirroredStrategy` in the same process gets upstream Keras.

Why creation time, and this way: Keras optimizers capture
`tf.distribute.get_strategy()` in `__init__` and have no creation or
gradient-aggregation hook (keras-team/keras#17429); hooking `build` or
`apply` instead would need the class patched before the optimizer is ever
used, i.e. process-wide. An optimizer created outside the scope (even if
built or compiled inside it) is not hooked, exactly as Keras would not
distribute it. `LossScaleOptimizer` is never hooked: it delegates to its
inner optimizer, which is.

`attach` checks the upstream Keras methods the hooks rely on
(`upstream.check()`, checked against Keras 3.15) and raises before any
step on a mismatch. tf_keras (`TF_USE_LEGACY_KERAS=1`) is not hooked: its
optimizers reduce through `tf.distribute` as usual.
"""

from __future__ import annotations

import contextlib
import threading
import weakref

from absl import logging
import tensorflow as tf

from tfdist_opt import runtime
from tfdist_opt.gradients.accumulation import contract
from tfdist_opt.gradients.accumulation import fit_length
from tfdist_opt.gradients import gradient_plan
from tfdist_opt.gradients.binding import hooks
from tfdist_opt.seam import upstream
from tfdist_opt.gradients.options import GradientOptions

_WRAPPED = ("scope", "experimental_distribute_dataset", "distribute_datasets_from_function")


class GradientBinding:
    """The gradient plan of one strategy, and what it decided.

    Attributes:
        plan: `gradient_plan.GradientPlan`.
        options: `GradientOptions` (`plan.options`).
        tuned: dict. Autotuned `bytes_per_pack` per gradient-shape
            signature (a tuple of (shape, dtype)), shared by the models built
            under this binding; filled by `tuned_pack_size`.
    """

    def __init__(self, strategy: tf.distribute.Strategy, plan: gradient_plan.GradientPlan):
        self.plan = plan
        self.options = plan.options
        self.tuned: dict = {}
        # Weak: the binding lives in the strategy's runtime, which must not
        # keep the strategy alive.
        self._strategy_ref = weakref.ref(strategy)
        self._lock = threading.Lock()

    @property
    def _strategy(self):
        return self._strategy_ref()

    def tuned_pack_size(self, variables, codec) -> int | None:
        """The autotuned pack size for these variables (measured once).

        `codec`: the `collectives.Codec` they travel with.
        """
        from tfdist_opt.gradients.autotune import autotune

        key = tuple(autotune.shapes_of(variables))
        with self._lock:
            if key in self.tuned:
                return self.tuned[key]
        best = autotune.maybe_tune_for_variables(
            self._strategy, variables, codec, self.options.autotune_csv
        )
        if best is not None:
            with self._lock:
                self.tuned[key] = best
        return best

    def adopt(self, optimizer) -> bool:
        """Hooks `optimizer` if it belongs to this binding's strategy."""
        import keras

        if isinstance(optimizer, keras.optimizers.LossScaleOptimizer) or hooks.state_of(optimizer):
            return False
        # Created now (Keras sets `_distribution_strategy` after the first
        # variable) in this strategy's scope, not in a nested other one.
        own = getattr(optimizer, "_distribution_strategy", tf.distribute.get_strategy())
        if own is not self._strategy:
            return False
        hooks.hook(
            optimizer, hooks.OptimizerState(self.options, binding=self, chain=self.plan.chain)
        )
        return True


def attach(
    strategy: tf.distribute.Strategy, options: GradientOptions | gradient_plan.GradientPlan
) -> tf.distribute.Strategy:
    """Makes Keras 3 optimizers created in `strategy.scope()` run a gradient plan.

    Optimizers created earlier keep what they had; re-attaching replaces
    the binding, never stacks.

    Args:
        strategy: a `tf.distribute.Strategy`.
        options: `gradient_plan.GradientPlan` (what `opt_strategy` planned),
            or `GradientOptions` (planned here, `gradient_plan.plan_of`).
            When the plan is not hooked nothing is wrapped (upstream Keras
            behaviour; multi-worker strategies plan `hooked` options).

    Returns:
        `strategy` (for chaining).

    Raises:
        RuntimeError: the installed Keras changed a method the hooks use.

    Example:
        >>> strategy = attach(tf.distribute.MirroredStrategy(),  # doctest: +SKIP
        ...                   GradientOptions(grad_accum=4, compression="bf16"))
    """
    plan = options
    if not isinstance(plan, gradient_plan.GradientPlan):
        plan = gradient_plan.plan_of(options)
    detach(strategy)
    binding = GradientBinding(strategy, plan)
    runtime.runtime_of(strategy).gradient_binding = binding
    if not plan.hooked:
        return strategy
    upstream.check()
    _wrap_scope(strategy, binding)
    if plan.path == "accumulation":
        _wrap_distribute_dataset(strategy, plan.options.grad_accum)
    return strategy


def detach(strategy: tf.distribute.Strategy) -> tf.distribute.Strategy:
    """Undoes `attach`: optimizers created from now on get upstream Keras.

    Optimizers hooked earlier stay hooked (`hooks.unhook` reverts one).
    """
    state = runtime.peek(strategy)
    if state is not None:
        state.gradient_binding = None
    for name in _WRAPPED:
        vars(strategy).pop(name, None)
    return strategy


def binding_of(strategy) -> GradientBinding | None:
    """The strategy's `GradientBinding`, if `attach` gave it one."""
    state = runtime.peek(strategy)
    return None if state is None else state.gradient_binding


def options_of(strategy) -> GradientOptions | None:
    """The `GradientOptions` attached to `strategy`, if any."""
    binding = binding_of(strategy)
    return None if binding is None else binding.options


class _HookedScope:
    """`strategy.scope()` + a variable creator that adopts new optimizers."""

    def __init__(self, original, binding: GradientBinding):
        self._original = original
        self._binding = binding
        self._stacks: list[contextlib.ExitStack] = []

    def __enter__(self):
        with contextlib.ExitStack() as stack:
            value = stack.enter_context(self._original())
            stack.enter_context(tf.variable_creator_scope(self._creator))
            self._stacks.append(stack.pop_all())
        return value

    def __exit__(self, *exc):
        return self._stacks.pop().__exit__(*exc)

    def _creator(self, next_creator, **kwargs):
        optimizer = upstream.creating_optimizer()
        if optimizer is not None:
            self._binding.adopt(optimizer)
        return next_creator(**kwargs)


def _wrap_scope(strategy, binding: GradientBinding) -> None:
    original = type(strategy).scope.__get__(strategy)
    strategy.scope = lambda: _HookedScope(original, binding)


def _wrap_distribute_dataset(strategy, k: int) -> None:
    """Logs the batch contract when a dataset is distributed, and makes every
    distributed dataset check `fit`'s length against `k` (`fit_length`)."""
    original = strategy.experimental_distribute_dataset

    def experimental_distribute_dataset(dataset, options=None):
        batch = _static_batch(dataset)
        if batch is not None:
            n = strategy.num_replicas_in_sync
            micro = contract.micro_batch_from_dataset(batch, k, n)
            logging.info(
                "tfdist_opt grad_accum: dataset batch %d = micro %d x %d "
                "replicas per step; effective global batch micro x k x "
                "replicas = %d x %d x %d = %d",
                batch,
                micro,
                n,
                micro,
                k,
                n,
                contract.effective_batch_size(micro, k, n),
            )
        return original(dataset, options)

    strategy.experimental_distribute_dataset = experimental_distribute_dataset
    fit_length.watch(strategy, k)


def _static_batch(dataset) -> int | None:
    try:
        spec = tf.nest.flatten(dataset.element_spec)[0]
        return spec.shape[0] if spec.shape.rank else None
    except (AttributeError, TypeError, IndexError):
        return None
