"""The Keras 3 internals the gradient hooks rely on, checked before use.

Keras has no public hook for the gradient all-reduce or for accumulation
under tf.distribute (keras-team/keras#17429 asks for a gradient-aggregation
hook; tf_keras had `gradient_aggregator`). The hooks therefore override or
call a few private methods of
`keras.src.backend.tensorflow.optimizer.TFOptimizer` (the base of every
Keras 3 optimizer on the TF backend). Their entries in
`tfdist_opt.private_api` carry the parameters each had in Keras
`CHECKED_KERAS` (`SIGNATURES` lists them); `check()` compares them with the
installed Keras and raises, naming the method and both versions, when one
differs or is gone, so an upgrade fails at `opt_strategy()` time instead of
training wrongly. A different Keras version with matching signatures is
logged once and accepted.
"""

from __future__ import annotations

import inspect
import threading

from absl import logging

from tfdist_opt import private_api
from tfdist_opt import versions

CHECKED_KERAS = versions.KERAS_RANGE

# (method, parameters incl. self, how the hooks use it): the
# `tfdist_opt.private_api` entries of `TFOptimizer` that carry `params`.
SIGNATURES = tuple(
    (e.attr, e.params, e.why)
    for e in private_api.ENTRIES
    if e.owner == private_api.TF_OPTIMIZER and e.params is not None
)

_LOCK = threading.Lock()
_WARNED: set[str] = set()


def optimizer_base():
    """`TFOptimizer`, the class whose methods `SIGNATURES` describes."""
    return private_api.tf_optimizer_class()


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
                "grad_accum=1, an int bytes_per_pack)."
            )
    if not isinstance(inspect.getattr_static(base, "iterations", None), property):
        raise RuntimeError(
            f"tfdist_opt's gradient hooks were checked against Keras "
            f"{CHECKED_KERAS}; in Keras {version} `{base.__name__}.iterations` "
            "is no longer a property."
        )
    _check_name_scope_stack(version)
    if not versions.keras_tested(version):
        with _LOCK:
            if version in _WARNED:
                return
            _WARNED.add(version)
        logging.warning(
            "tfdist_opt gradient hooks: checked against Keras %s, "
            "running on %s (the signatures they use match)",
            CHECKED_KERAS,
            version,
        )


def creating_optimizer():
    """The Keras optimizer whose name scope is innermost, or None."""
    stack = private_api.name_scope_stack()
    if not stack:
        return None
    caller = getattr(stack[-1], "caller", None)
    return caller if isinstance(caller, optimizer_base()) else None


def _check_name_scope_stack(version: str) -> None:
    import keras

    with keras.name_scope("tfdist_probe", caller=check):
        stack = private_api.name_scope_stack()
        ok = bool(stack) and getattr(stack[-1], "caller", None) is check
    if not ok:
        raise RuntimeError(
            f"tfdist_opt's gradient hooks were checked against Keras "
            f"{CHECKED_KERAS}; in Keras {version} `backend.name_scope` no "
            "longer records its caller in global_state 'name_scope_stack', "
            "which is how optimizers created in opt_strategy().scope() are "
            "found."
        )


def _params(method) -> tuple[str, ...] | None:
    if method is None or not callable(method):
        return None
    try:
        return tuple(inspect.signature(method).parameters)
    except (TypeError, ValueError):
        return None
