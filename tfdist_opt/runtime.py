"""What tfdist_opt keeps about a strategy, a model or a fit: one place, held weakly.

`runtime_of(strategy)` is the strategy's `StrategyRuntime`: the settings
`opt_strategy()` decided for it (gradient options, file writers, stall
inspector, XLA fallback) and what it tracks while it trains. It lives in
one `weakref.WeakKeyDictionary` keyed by the strategy, so it goes with the
strategy and no attribute is added to a TensorFlow object.

State about other TF/Keras objects (a model, an optimizer, a distributed
dataset, a callback) lives in a `SideTable` here: a weakly keyed table of
one small state object per instance, never an attribute on the instance.
A side table's values must not refer to their key (the key would then
never be collected); a `FitCall` names no model for that reason.

Markers that stay on TF/Keras objects, because TF, Keras or the user reach
them through the object itself:

- per-instance subclasses (`_class_swap.cached_subclass`): Python
  dispatches methods on the class, and `isinstance` against the mixin is
  the marker. Models (`strategy.saving.chief_saving.ChiefSaving`,
  `tfdist_opt.keras.keras_steps.KerasSteps`,
  `parameter_server.keras_model.CoordinatorTraining`), optimizers
  (`gradients.binding.hooks.GradientHooks`, `gradients.zero.sharded_state`,
  `parameter_server.locked_updates`), variables (`gradients.binding.replica_slots`,
  `parameter_server.variables`), Keras callbacks
  (`strategy.saving.chief_callbacks`), distributed datasets
  (`gradients.accumulation.fit_length`, `parameter_server.strategy`). Their methods
  carry a `_tfdist_` prefix where a plain name could collide with a TF or
  Keras one (`_tfdist_saved_value`, `_tfdist_load_value`, `_tfdist_make`);
  `GradientHooks._tfdist_mixin` marks the hook classes in an MRO
  (`gradients.binding.fused_updates`).
- `_tfdist_strategy` and `_tfdist_shard` on replica-slot and ZeRO
  shard variables (`gradients.binding.replica_slots`, `gradients.zero.sharded_state`):
  TF variables cannot key a weak table (they are unhashable), and TF's
  checkpoint code calls their `_serialize_to_tensors` with no other
  context.
- instance attributes that replace a method on one strategy
  (`scope`, `experimental_distribute_dataset`,
  `distribute_datasets_from_function`: `gradients.binding.keras_binding`,
  `gradients.accumulation.fit_length`) or one Keras `Embedding` (`call`:
  `parameter_server.variables`): Keras calls those methods on the object
  it holds.
- `_tfdist_dataset_fn` on a `tf.data` dataset from `build_dataset`
  (`data.pipeline`): the dataset travels through user code to a
  parameter-server `fit`, which reads how to rebuild it per worker.
- `_tfdist_opt_skipping` on a model while `DistributedBackupAndRestore`
  fast-forwards restored batches (`callbacks.throughput.SKIPPING_ATTR`):
  user callbacks read it to leave those batches out of their statistics.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import weakref
from typing import Any, Callable

_LOCK = threading.RLock()


@dataclasses.dataclass(eq=False)
class StrategyRuntime:
    """tfdist_opt's state for one strategy.

    Attributes:
        gradient_binding: `gradients.binding.keras_binding.GradientBinding` or None.
        stall: `stall.settings.StallSettings` or None (single worker).
        jit_fallback: str. `StrategyConfig.jit_fallback` (`"warn"`).
        storage_sharing: str. `StrategyConfig.storage_sharing`, read by
            `strategy.saving.file_writers` (`"auto"`).
        steps_running: int. Parameter-server `fit`/`evaluate`/`predict`
            calls running now (`parameter_server.training.steps_running`).
        local_replica_ids: list of int. Global replica id of each local
            device (`gradients.binding.replica_slots`), found once.
    """

    gradient_binding: Any = None
    stall: Any = None
    jit_fallback: str = "warn"
    storage_sharing: str = "auto"
    steps_running: int = 0
    local_replica_ids: list | None = None


_RUNTIMES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def runtime_of(strategy) -> StrategyRuntime:
    """The `StrategyRuntime` of `strategy` (made empty on first use)."""
    with _LOCK:
        runtime = _RUNTIMES.get(strategy)
        if runtime is None:
            runtime = _RUNTIMES[strategy] = StrategyRuntime()
        return runtime


def peek(strategy) -> StrategyRuntime | None:
    """The `StrategyRuntime` of `strategy` if it has one (None for None)."""
    if strategy is None:
        return None
    try:
        return _RUNTIMES.get(strategy)
    except TypeError:  # not weakly referenceable: never ours
        return None


class SideTable:
    """Per-object state for objects that are not ours, held weakly.

    `table.get(obj)` is the state or None; `table.of(obj)` makes it with
    `factory()` on first use; `table.pop(obj)` forgets it.
    """

    def __init__(self, factory: Callable[[], Any] = dict):
        self._factory = factory
        self._states: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()

    def get(self, obj):
        try:
            return self._states.get(obj)
        except TypeError:
            return None

    def of(self, obj):
        with _LOCK:
            state = self._states.get(obj)
            if state is None:
                state = self._states[obj] = self._factory()
            return state

    def set(self, obj, state) -> None:
        with _LOCK:
            self._states[obj] = state

    def pop(self, obj):
        with _LOCK:
            return self._states.pop(obj, None)

    def items(self) -> list:
        with _LOCK:
            return list(self._states.items())


@dataclasses.dataclass(eq=False)
class ObjectState:
    """tfdist_opt's state for one TF/Keras object that is not a strategy.

    One class for every kind of object keeps the table one; each field
    says which kind uses it.

    Attributes:
        gradients: optimizer: `gradients.binding.hooks.OptimizerState`.
        accumulators: optimizer: its gradient accumulators
            (`gradients.accumulation.accumulation`; tracked as optimizer variables).
        powersgd: optimizer: `gradients.powersgd.lowrank.PowerSGDState`.
        zero: optimizer: `gradients.zero.sharded_state`'s shard plan.
        resume_epoch: model: the epoch a parameter-server backup restored
            (`parameter_server.backup`), where `fit` starts.
        xla_warned: model: XLA fallback stages already warned about
            (`tfdist_opt.keras.xla_steps`).
        writes: Keras `BackupAndRestore`: whether this worker writes its
            directory (`strategy.saving.chief_callbacks`); None before `fit`.
        sharded_call: Keras `Embedding`: its `call` reads a sharded table
            (`parameter_server.variables`).
        grad_accum: distributed dataset: the `grad_accum` its fits are
            checked against (`gradients.accumulation.fit_length`).
    """

    gradients: Any = None
    accumulators: list | None = None
    powersgd: Any = None
    zero: Any = None
    resume_epoch: int = 0
    xla_warned: set = dataclasses.field(default_factory=set)
    writes: bool | None = None
    sharded_call: bool = False
    grad_accum: int = 1


OBJECTS = SideTable(ObjectState)


# ------------------------------------------------------------------- fits
@dataclasses.dataclass(eq=False)
class FitCall:
    """One running Keras `fit` of a model built under our strategy.

    Keras keeps these values in `fit`'s locals; the model's per-instance
    `fit` (`tfdist_opt.keras.keras_steps.KerasSteps`, parameter-server `fit`) and
    `_maybe_symbolic_build` record them here instead, for the code that
    needs them mid-fit (fit length against `grad_accum`, uneven inputs,
    callback order).

    Attributes:
        epochs: int. `fit`'s `epochs`.
        initial_epoch: int. `fit`'s `initial_epoch` argument (Keras starts
            at `model._initial_epoch or initial_epoch` after a restore).
        callbacks: list. The callbacks `fit` was given, in order.
        epoch_iterator: Keras's `EpochIterator` over the training data, or
            None until `fit` makes it.
        building: bool. True while `_maybe_symbolic_build` pulls a batch.
    """

    epochs: int = 1
    initial_epoch: int = 0
    callbacks: list = dataclasses.field(default_factory=list)
    epoch_iterator: Any = None
    building: bool = False


FITS = SideTable(FitCall)


@contextlib.contextmanager
def fit_call(model, epochs, initial_epoch, callbacks):
    """Records `model`'s running `fit` in `FITS` while the block runs."""
    if callbacks is None:
        callbacks = []
    elif hasattr(callbacks, "callbacks"):  # a CallbackList
        callbacks = callbacks.callbacks
    previous = FITS.get(model)
    FITS.set(model, FitCall(int(epochs or 1), int(initial_epoch or 0), list(callbacks)))
    try:
        yield
    finally:
        if previous is None:
            FITS.pop(model)
        else:
            FITS.set(model, previous)
