"""The Keras models built under our strategies, known where Keras builds them.

A model built in the scope of a strategy from `opt_strategy()` gets a
per-instance subclass (`chief_saving`, `keras_steps`,
`parameter_server.keras_model`). To swap its class the strategy must know
the model, and Keras 3 has no instance-creation hook: a model's
constructor reads `tf.distribute.get_strategy()` and keeps it in
`_distribute_strategy`, but hands the model to nothing.

Keras does open the model's name scope when it builds or calls it:
`Layer.__new__` wraps `build` in `backend.name_scope(model.name,
caller=model)` (a functional model builds itself in its constructor; a
`Sequential` with an `Input` too; a subclassed model on its first call),
and `Layer.__call__` opens the same scope. Each scope is pushed on the
thread's `name_scope_stack` (Keras's `global_state`). While our scope is
entered, `recording()` puts a list there whose `append` notes every Keras
model pushed, weakly; the strategy's scope exit (`take`) then hands over
the ones built under that strategy. Nothing scans the heap or walks
stack frames: asking the garbage collector for an object's referrers
handed out objects still under construction and crashed (SIGSEGV at scope
exit), and listing every tracked object broke a `tuple(generator)` another
thread was filling.

A model built in our scope but first built later, outside it (a
`Sequential` without an `Input`), is noted when Keras's `fit` builds it
inside `strategy.scope()` (`_maybe_symbolic_build`), before the train
function is made.
"""

from __future__ import annotations

import contextlib
import threading
import weakref

from tfdist_opt import private_api

_LOCK = threading.Lock()
# Models whose name scope was opened while one of our scopes was entered,
# not yet handed to their strategy.
_SEEN: "weakref.WeakSet" = weakref.WeakSet()


def _model_type() -> type:
    import keras

    return keras.Model


def _is_trainer(caller) -> bool:
    """A `keras.Model`, or a layer with Keras's trainer mixed in.

    Keras's own tests (and some users) train `class M(Trainer, layers.Dense)`:
    a layer, not a `keras.Model`, with `fit` and the step functions of the
    backend's trainer; it gets the same per-instance subclass.
    """
    if isinstance(caller, _model_type()):
        return True
    import keras

    return isinstance(caller, keras.layers.Layer) and callable(
        getattr(type(caller), "make_train_function", None)
    )


class RecordingStack(list):
    """Keras's name scope stack, noting each Keras model pushed on it."""

    def append(self, scope):
        caller = getattr(scope, "caller", None)
        if caller is not None and _is_trainer(caller):
            with _LOCK:
                _SEEN.add(caller)
        super().append(scope)


@contextlib.contextmanager
def recording():
    """Notes the Keras models built or called in this thread meanwhile."""
    previous = private_api.name_scope_stack()
    if isinstance(previous, RecordingStack):
        yield
        return
    recorder = RecordingStack(previous or ())
    private_api.set_name_scope_stack(recorder)
    try:
        yield
    finally:
        # `keras.backend.clear_session()` meanwhile replaced the stack: keep it.
        if private_api.name_scope_stack() is recorder:
            restored = previous if previous is not None else []
            restored[:] = recorder
            private_api.set_name_scope_stack(restored)


def take(strategy) -> list:
    """The noted models built under `strategy`, removed from the notes."""
    with _LOCK:
        mine = [m for m in _SEEN if getattr(m, "_distribute_strategy", None) is strategy]
        for m in mine:
            _SEEN.discard(m)
    return mine


def note(model) -> None:
    """Notes `model` as if Keras had built it in our scope (tests)."""
    with _LOCK:
        _SEEN.add(model)
