"""The Keras 3 internals the gradient hooks rely on, checked before use.

Keras has no public hook for the gradient all-reduce or for accumulation
under tf.distribute (keras-team/keras#17429 asks for a gradient-aggregation
hook; tf_keras had `gradient_aggregator`). The hooks therefore override or
call a few private methods of
`keras.src.backend.tensorflow.optimizer.TFOptimizer` (the base of every
Keras 3 optimizer on the TF backend). `SIGNATURES` lists each one with the
parameters it had in Keras `CHECKED_KERAS`; `check()` compares them with the
installed Keras and raises, naming the method and both versions, when one
differs or is gone, so an upgrade fails at `opt_strategy()` time instead of
training wrongly. A different Keras version with matching signatures is
logged once and accepted.

`ATTRIBUTES` lists the private attributes read (not called), with why;
every private name here is also in `tfdist_opt.private_api` (resolved by
tests/test_private_api.py).
"""

from __future__ import annotations

import inspect
import threading

from absl import logging

CHECKED_KERAS = "3.15"

# (method, parameters incl. self, how the hooks use it). Overridden methods
# are called through `super()`; "calls" means the hooks call it directly.
SIGNATURES = (
    ("build", ("self", "variables"),
     "overridden: upstream build, then the accumulators and the autotune"),
    ("_all_reduce_sum_gradients", ("self", "grads_and_vars"),
     "overridden: compressed + packed all-reduce (keras-team/keras#17429)"),
    ("_backend_apply_gradients", ("self", "grads", "trainable_variables"),
     "overridden with grad_accum > 1: accumulate, all-reduce every k-th "
     "micro-step; `apply` (unchanged) still filters, unscales, constrains "
     "and counts micro-steps in `_iterations`"),
    ("_get_current_learning_rate", ("self",),
     "overridden with grad_accum > 1: schedules see updates, not micro-steps"),
    ("apply", ("self", "grads", "trainable_variables"),
     "relied on: calls `_backend_apply_gradients` once and then "
     "`_iterations.assign_add(1)` once per call"),
    ("update_step", ("self", "gradient", "variable", "learning_rate"),
     "calls: one variable's update, inside `extended.update`"),
    ("_apply_weight_decay", ("self", "variables"), "calls: on update steps"),
    ("_get_variable_index", ("self", "variable"),
     "calls: accumulator of a (possibly filtered) variable"),
    ("add_variable_from_reference",
     ("self", "reference_variable", "name", "initializer"),
     "calls: creates the accumulators as tracked optimizer variables"),
)

ATTRIBUTES = (
    ("TFOptimizer._distribution_strategy",
     "the strategy Keras captured in `__init__` (tf.distribute.get_strategy())"),
    ("BaseOptimizer._iterations", "micro-step counter (a Keras variable)"),
    ("BaseOptimizer._trainable_variables", "the variables build() was given"),
    ("BaseOptimizer._learning_rate", "float variable or schedule"),
    ("keras.src.backend.common.global_state name_scope_stack[-1].caller",
     "which optimizer is creating a variable: Keras wraps every optimizer "
     "variable creation in `backend.name_scope(self.name, caller=self)`"),
)

_LOCK = threading.Lock()
_WARNED: set[str] = set()


def optimizer_base():
    """`TFOptimizer`, the class whose methods `SIGNATURES` describes."""
    from keras.src.backend.tensorflow.optimizer import TFOptimizer

    return TFOptimizer


def check(base=None) -> None:
    """Raises `RuntimeError` unless every `SIGNATURES` entry matches.

    Args:
        base: the class to inspect. Defaults to Keras's `TFOptimizer`.
    """
    import keras

    base = base or optimizer_base()
    version = keras.__version__
    for name, params, use in SIGNATURES:
        method = getattr(base, name, None)
        got = _params(method)
        if got != params:
            raise RuntimeError(
                f"tfdist_opt's gradient hooks were checked against Keras "
                f"{CHECKED_KERAS}; the installed Keras {version} changed "
                f"`{base.__name__}.{name}` ({use}). Expected parameters "
                f"{params}, found {got}. Use Keras {CHECKED_KERAS}, or turn "
                "the gradient features off (compression='none', "
                "grad_accum=1, an int bytes_per_pack).")
    if not isinstance(inspect.getattr_static(base, "iterations", None), property):
        raise RuntimeError(
            f"tfdist_opt's gradient hooks were checked against Keras "
            f"{CHECKED_KERAS}; in Keras {version} `{base.__name__}.iterations` "
            "is no longer a property.")
    _check_name_scope_stack(version)
    if not version.startswith(CHECKED_KERAS + ".") and version != CHECKED_KERAS:
        with _LOCK:
            if version in _WARNED:
                return
            _WARNED.add(version)
        logging.warning("tfdist_opt gradient hooks: checked against Keras %s, "
                        "running on %s (the signatures they use match)",
                        CHECKED_KERAS, version)


def creating_optimizer():
    """The Keras optimizer whose name scope is innermost, or None."""
    from keras.src.backend.common import global_state

    stack = global_state.get_global_attribute("name_scope_stack")
    if not stack:
        return None
    caller = getattr(stack[-1], "caller", None)
    return caller if isinstance(caller, optimizer_base()) else None


def _check_name_scope_stack(version: str) -> None:
    import keras
    from keras.src.backend.common import global_state

    with keras.name_scope("tfdist_probe", caller=check):
        stack = global_state.get_global_attribute("name_scope_stack")
        ok = bool(stack) and getattr(stack[-1], "caller", None) is check
    if not ok:
        raise RuntimeError(
            f"tfdist_opt's gradient hooks were checked against Keras "
            f"{CHECKED_KERAS}; in Keras {version} `backend.name_scope` no "
            "longer records its caller in global_state 'name_scope_stack', "
            "which is how optimizers created in opt_strategy().scope() are "
            "found.")


def _params(method) -> tuple[str, ...] | None:
    if method is None or not callable(method):
        return None
    try:
        return tuple(inspect.signature(method).parameters)
    except (TypeError, ValueError):
        return None
