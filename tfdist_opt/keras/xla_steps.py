"""Keras 3 steps compiled with XLA per replica under our strategies, and the fallback.

`compile(jit_compile=True)` fails under `tf.distribute.MirroredStrategy`
and `MultiWorkerMirroredStrategy` (keras-team/keras#18145,
keras-team/tf-keras#194, tensorflow/tensorflow#53140): Keras 3's TF trainer
(`keras/src/backend/tensorflow/trainer.py`, `_make_function`) wraps the
whole multi-replica step, `strategy.run(train_step)` plus the cross-replica
reduction of the logs, in `tf.function(jit_compile=True)`. XLA then compiles
every replica's ops into one cluster on the first device ("Trying to access
resource .../replica_1/... located in device CPU:1 from device CPU:0"), and
the collectives it contains have no XLA kernel on CPU.

A model built in the scope of a strategy from `opt_strategy()` gets its
class swapped (per instance, `tfdist_opt._class_swap`) to one with the
`KerasSteps` mixin (`tfdist_opt.keras.keras_steps`). With `jit_compile`
on and more than one replica (or several workers), its train and test
functions are Keras's own, built with the outer `tf.function` not
compiled, and each replica's step compiled:

* train: `train_step` (forward, loss, backward, metric updates) runs in
  `tf.function(jit_compile=True)` on the replica's device, with the
  optimizer's `apply_gradients`/`apply` intercepted: the gradients come out
  of the compiled function, and the optimizer applies them outside it,
  where the gradient all-reduce (and tfdist_opt's packing, compression,
  accumulation) runs as without XLA;
* test: `test_step` compiled per replica; predict is already compiled per
  replica by Keras.

A step that cannot be compiled per replica, because it runs a
cross-replica collective before the optimizer (synchronized
`BatchNormalization`, an all-reduce in a custom `train_step`), is found
when the step is traced, before it runs: the compiled graph is scanned for
collective ops, and a `merge_call` while tracing is caught. Then
`StrategyConfig.jit_fallback` decides: `"warn"` (default) emits one
`XlaFallbackWarning` naming the stage, the op and its layer, and runs that
stage without XLA; `"error"` raises `UnsupportedCombinationError`.
Numerics: XLA fuses and reorders float operations, so weights after
`fit` equal those of `jit_compile=False` to float32 rounding (tested to
rel 1e-5 after 8 SGD steps), not bit for bit, exactly as on one device.

Keras's `"auto"` keeps its own rule: it turns XLA off on CPU-only hosts and
under any `tf.distribute` strategy (`Trainer._resolve_auto_jit_compile`), so
only an explicit `jit_compile=True` takes this path.
"""

from __future__ import annotations

import contextlib
import sys
import warnings

from tfdist_opt import private_api
from tfdist_opt import runtime
from tfdist_opt.keras import model_registry

JIT_FALLBACKS = ("warn", "error")
# Collective op types (TF 2.21); none has an XLA kernel on CPU.
_COLLECTIVE_PREFIXES = ("Collective", "Nccl")


class UnsupportedCombinationError(ValueError):
    """A Keras option this strategy cannot run, with the reason.

    Raised before any step runs (at the step function's trace at the latest).
    """


class XlaFallbackWarning(UserWarning):
    """A step stage that runs without XLA although `jit_compile=True`."""


def set_jit_fallback(strategy, jit_fallback: str) -> None:
    """Records `StrategyConfig.jit_fallback` on `strategy` (see module doc)."""
    if jit_fallback not in JIT_FALLBACKS:
        raise ValueError(
            f"Invalid value for `jit_fallback`: expected one of {JIT_FALLBACKS}. "
            f"Received: jit_fallback={jit_fallback!r}"
        )
    runtime.runtime_of(strategy).jit_fallback = jit_fallback


def jit_fallback_of(strategy) -> str:
    """The strategy's `jit_fallback` (`"warn"` unless `opt_strategy()` set it)."""
    state = runtime.peek(strategy)
    return "warn" if state is None else state.jit_fallback


def needs_per_replica_xla(model) -> bool:
    """True when `model`'s whole-step XLA compile would fail here."""
    import tensorflow as tf

    if not model.jit_compile or model.run_eagerly:
        return False
    strategy = model.distribute_strategy
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return True
    return (
        isinstance(strategy, tf.distribute.MirroredStrategy) and strategy.num_replicas_in_sync > 1
    )


# ---------------------------------------------------------------- compiling
class _Captured:
    """What the optimizer was asked to apply while the step was traced."""

    def __init__(self):
        self.calls: list[tuple] = []

    @contextlib.contextmanager
    def intercepting(self, optimizer):
        if optimizer is None:
            yield
            return

        def apply_gradients(grads_and_vars):
            grads, variables = zip(*grads_and_vars)
            self.calls.append((list(grads), list(variables)))
            return optimizer.iterations

        def apply(grads, trainable_variables=None):
            self.calls.append(
                (list(grads), None if trainable_variables is None else list(trainable_variables))
            )

        optimizer.apply_gradients, optimizer.apply = apply_gradients, apply
        try:
            yield
        finally:
            del optimizer.apply_gradients, optimizer.apply


def compiled_train_step(model, train_step):
    """`train_step` under XLA per replica; the optimizer applies outside it."""
    import tensorflow as tf

    captured = _Captured()

    def body(data):
        captured.calls = []
        with captured.intercepting(model.optimizer):
            logs = train_step(data)
        return logs, [grads for grads, _ in captured.calls]

    compiled = tf.function(body, jit_compile=True, reduce_retracing=True)

    def step(data):
        reason = _why_not_compilable(compiled, data)
        if reason is not None:
            _fall_back(model, "train step", reason)
            return train_step(data)
        logs, grads = compiled(data)
        for new_grads, (_, variables) in zip(grads, captured.calls):
            if variables is None:
                model.optimizer.apply(new_grads)
            else:
                model.optimizer.apply(new_grads, variables)
        return logs

    return step


def compiled_step(model, stage, step_fn):
    import tensorflow as tf

    compiled = tf.function(step_fn, jit_compile=True, reduce_retracing=True)

    def step(data):
        reason = _why_not_compilable(compiled, data)
        if reason is not None:
            _fall_back(model, stage, reason)
            return step_fn(data)
        return compiled(data)

    return step


def _why_not_compilable(compiled, data) -> str | None:
    """Traces `compiled` for `data`; why XLA cannot compile it per replica."""
    scopes = _ScopesLeftByErrors(private_api.name_scope_stack() or ())
    try:
        with _name_scope_stack(scopes):
            concrete = compiled.get_concrete_function(data)
    except RuntimeError as e:
        if "merge_call" not in str(e):
            raise
        layer = scopes.innermost_layer(e)
        return (
            "it calls merge_call (a cross-replica all-reduce: synchronized "
            "BatchNormalization, or a collective in a custom step) "
            + (f"in layer {layer!r} " if layer else "")
            + "while XLA traces it"
        )
    graph_def = concrete.graph.as_graph_def()
    nodes = list(graph_def.node)
    for function in graph_def.library.function:
        nodes.extend(function.node_def)
    for node in nodes:
        if node.op.startswith(_COLLECTIVE_PREFIXES):
            return (
                f"it runs the collective {node.op} at {node.name!r} (a "
                "cross-replica reduction inside the step: synchronized "
                "BatchNormalization, or an all-reduce in a custom step), "
                "which XLA cannot compile on this device"
            )
    return None


class _ScopesLeftByErrors(model_registry.RecordingStack):
    """Keras's name scope stack, noting the first Keras layer (not a model)
    whose scope each exception unwinds: the layer the error came from.

    Keras opens `backend.name_scope(layer.name, caller=layer)` around every
    layer call and pops it in the scope's `__exit__`, where the propagating
    exception is the one being handled (`sys.exc_info()`). Models pushed
    meanwhile are noted as by `model_registry.recording()`.
    """

    def __init__(self, items=()):
        super().__init__(items)
        self._left: dict[int, tuple] = {}  # id(exception) -> (exception, name)

    def pop(self, *args):
        scope = super().pop(*args)
        error = sys.exc_info()[1]
        if error is not None and id(error) not in self._left:
            import keras

            caller = getattr(scope, "caller", None)
            if isinstance(caller, keras.layers.Layer) and not isinstance(caller, keras.Model):
                self._left[id(error)] = (error, caller.name)
        return scope

    def innermost_layer(self, error) -> str | None:
        """The layer `error` (or an exception it was raised from) left first."""
        while error is not None:
            left = self._left.get(id(error))
            if left is not None and left[0] is error:
                return left[1]
            error = error.__cause__ or error.__context__
        return None


@contextlib.contextmanager
def _name_scope_stack(stack):
    """Keras uses `stack` as this thread's name scope stack meanwhile."""
    previous = private_api.name_scope_stack()
    private_api.set_name_scope_stack(stack)
    try:
        yield
    finally:
        if private_api.name_scope_stack() is stack:
            restored = previous if previous is not None else []
            restored[:] = stack
            private_api.set_name_scope_stack(restored)


def _fall_back(model, stage, reason):
    """Raises, or warns once per model and stage (every replica traces)."""
    strategy = model.distribute_strategy
    warned = runtime.OBJECTS.of(model).xla_warned
    where = (
        f"jit_compile=True under {type(strategy).__name__} "
        f"({strategy.num_replicas_in_sync} replicas): the {stage} of model "
        f"{model.name!r} cannot be XLA-compiled per replica: {reason}"
    )
    if jit_fallback_of(strategy) == "error":
        raise UnsupportedCombinationError(
            f"Unsupported combination: {where}. Expected a step without "
            "cross-replica collectives, jit_compile=False, or "
            "jit_fallback='warn' (runs this stage without XLA)."
        )
    if stage in warned:
        return
    warned.add(stage)
    warnings.warn(
        f"tfdist_opt: {where}. This stage runs without XLA "
        "(jit_fallback='warn'; 'error' raises instead).",
        XlaFallbackWarning,
        stacklevel=2,
    )
