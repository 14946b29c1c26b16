"""`compression="auto"` in Keras `fit`: time the first steps, pick, apply.

An optimizer hooked with `compression="auto"` starts as `"none"` (exact
float32 all-reduce: the gradient path treats `"auto"` like `"none"`). The
first train function a model in an `opt_strategy()` scope makes is wrapped
(`wrap_train_function`):

* not a multi-worker strategy of two or more workers: no gradient crosses a
  link; the choice is `"none"`, decided at once;
* multi-worker: after `WARMUP_CALLS` untimed calls (tracing, connection
  set-up), `TIMED_CALLS` calls are timed; every worker averages them
  (`timing.agree`), measures the link (`auto_compression.measure_link`, an
  agreed all-reduce rate), and decides with `auto_compression.choose_for`
  from the model's gradient bytes and the PowerSGD plan of its variables.
  The chief's choice is then broadcast (every other worker contributes 0
  to a SUM), so every worker applies the same one even if a float rounded
  differently somewhere: different choices would trace different
  collectives and hang.

The choice becomes the optimizer's `GradientOptions.compression` and its
chain of gradient stages is made again from it (`chain_binding.rebind`;
PowerSGD state is created then, as `build` would have); the model's train function
is made again, and the next call runs it. The chief prints one line to
stderr, `auto_compression.start_line`: the choice, `(LOSSY: ...)` for bf16
and PowerSGD, and the predicted step of every candidate. Every worker runs
the same number of train-function calls, so the decision's collectives
happen at the same call everywhere. A fit shorter than the warm-up keeps
`"none"` and decides in the next one.
"""

from __future__ import annotations

import dataclasses
import statistics
import sys
import time

import tensorflow as tf

from tfdist_opt.gradients.autotune import auto_compression
from tfdist_opt.gradients.stages import chain_binding
from tfdist_opt.gradients.binding import hooks
from tfdist_opt.gradients.powersgd import powersgd
from tfdist_opt.gradients.autotune import timing

WARMUP_CALLS = 2
TIMED_CALLS = 3


def pending_state(model):
    """The hooked optimizer state of `model` still at `compression="auto"`."""
    optimizer = getattr(model, "optimizer", None)
    optimizer = getattr(optimizer, "inner_optimizer", optimizer)  # LossScaleOptimizer
    if optimizer is None:
        return None, None
    state = hooks.state_of(optimizer)
    if state is None or state.options.compression != "auto":
        return None, None
    return optimizer, state


def wrap_train_function(model, function):
    """`function`, or a wrapper deciding `"auto"` on its first calls."""
    optimizer, state = pending_state(model)
    if state is None:
        return function
    strategy = model.distribute_strategy
    if not _multi_worker(strategy):
        _apply(model, optimizer, state, "none", "one host: no gradient crosses a link")
        return function  # traced on its first call: it runs "none"
    return _TimedWarmup(model, function)


class _TimedWarmup:
    """Calls `function`; times calls WARMUP_CALLS+1.. and then decides."""

    def __init__(self, model, function):
        self._model = model
        self._function = function
        self._calls = 0
        self._times: list[float] = []

    def __call__(self, *args, **kwargs):
        self._calls += 1
        if self._calls <= WARMUP_CALLS or len(self._times) >= TIMED_CALLS:
            return self._function(*args, **kwargs)
        start = time.perf_counter()
        out = self._function(*args, **kwargs)
        for value in tf.nest.flatten(out):  # the step has finished
            if hasattr(value, "numpy"):
                value.numpy()
        self._times.append(time.perf_counter() - start)
        if len(self._times) == TIMED_CALLS:
            decide(self._model, statistics.median(self._times))
        return out


def decide(model, call_s: float) -> str:
    """Picks and applies the compression of `model`'s optimizer (a collective).

    Args:
        model: a compiled Keras model whose optimizer is at `"auto"`.
        call_s: float. This worker's median seconds per train-function call.

    Returns:
        The choice applied.
    """
    optimizer, state = pending_state(model)
    strategy = model.distribute_strategy
    per_call = getattr(model, "steps_per_execution", 1) or 1
    # One update = grad_accum micro-steps and one all-reduce.
    update_s = timing.agree(strategy, [call_s])[0] / per_call * state.options.grad_accum
    variables = list(optimizer._trainable_variables)  # pylint: disable=protected-access
    grad_bytes = auto_compression.grad_bytes_of_variables(variables)
    powersgd_bytes = None
    if not state.options.shard_optimizer_state:
        plan = powersgd.plan(
            [tuple(v.shape) for v in variables],
            [_dtype_name(v) for v in variables],
            state.options.powersgd_rank,
            state.options.powersgd_min_compression,
            state.options.powersgd_wire,
        )
        if plan.matrices:
            powersgd_bytes = plan.sent_bytes
    choice, reason = auto_compression.choose_for(
        strategy, grad_bytes, update_s, powersgd_bytes=powersgd_bytes
    )
    chief = _is_chief(strategy)
    index = auto_compression.CHOICES.index(choice)
    agreed = int(round(timing.agree(strategy, [index if chief else 0], "SUM")[0]))
    choice = auto_compression.CHOICES[agreed]
    _apply(model, optimizer, state, choice, reason, chief)
    model.make_train_function(force=True)  # traced again with the choice
    return choice


def _apply(model, optimizer, state, choice, reason, chief=True) -> None:
    options = dataclasses.replace(state.options, compression=choice)
    # The optimizer runs its chain of stages: made again from the choice
    # (PowerSGD's state is created here, as `build` would have).
    chain_binding.rebind(optimizer, state, options)
    if choice == "powersgd":
        reason += f"; PowerSGD runs from update {options.powersgd_start_step}"
    if chief:
        line = auto_compression.start_line(choice, reason, options.powersgd_rank)
        print(line, file=sys.stderr, flush=True)


def _multi_worker(strategy) -> bool:
    from tfdist_opt.gradients.autotune import autotune  # pylint: disable=g-import-not-at-top

    return (
        isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
        and autotune.num_workers(strategy) >= 2
    )


def _is_chief(strategy) -> bool:
    from tfdist_opt.strategy import topology  # pylint: disable=g-import-not-at-top

    return topology.strategy_is_chief(strategy)


def _dtype_name(v) -> str:
    d = getattr(v, "dtype", "float32")
    return d if isinstance(d, str) else tf.as_dtype(d).name
