"""The stall inspector in Keras `fit`: progress events, the input marker, the thread.

`opt_strategy()` (multi-worker kind) attaches `StallSettings` to the
strategy (`attach`, `tfdist_opt.stall.settings`); `fit` of a model built in its scope
(`tfdist_opt.strategy.saving.chief_saving.ChiefSaving.fit`) calls `watch_fit`,
which adds two callbacks around the user's and starts one `Inspector`
thread for that `fit`. No user code changes. With the inspector off
(`stall_warn_s` 0 or None) only the uneven-inputs agreement runs
(`FitWatch.agree_on_epoch_length`, `tfdist_opt.stall.uneven`).

Phases (what `Progress.phase` means here):

- `callbacks`: the first callback's `on_train_batch_begin` up to the last
  one's; after a step, from `on_train_batch_end` (when Keras dispatches
  batch-end callbacks on the training thread) up to the next step; and
  the epoch hooks.
- `step`: from the last callback's `on_train_batch_begin` until the step's
  batch-end, with the batch in hand: forward, backward, all-reduce, update.
- `input`: the same span, while this worker's own input pipeline has not
  produced the step's batch. Keras reads the batch inside its compiled
  train function, where TF's distributed iterator first agrees across
  workers that every one has a batch (one more collective: the reason
  uneven inputs end together). So a worker waiting for a peer's input
  waits in a collective too, and the arrival has to be counted before
  that: each per-worker dataset the strategy distributes ends in one
  identity `map` adding 1 to a local int64 variable per batch
  (`count_inputs`, in tf.data's threads). The inspector thread compares
  that count (read once a poll) with the steps begun this epoch.
- `validation`: from `on_test_begin` to `on_test_end` inside `fit`.
- `saving`: a `model.save` / `save_weights` / backup save in progress
  (`saving()`; a label, not an event, because not every worker writes).

Cost on the training thread: a tuple swap per event (two or three per
step), one variable read per epoch; the count is one `AssignAddVariableOp`
per batch in tf.data's threads. No I/O, no lock, no collective.
"""

from __future__ import annotations

import contextlib
import threading

import keras

from tfdist_opt.callbacks.throughput import SKIPPING_ATTR
from tfdist_opt.coordination import kv_store
from tfdist_opt import _logging
from tfdist_opt import private_api
from tfdist_opt import runtime
from tfdist_opt.stall import inspector as inspector_lib
from tfdist_opt.stall.settings import (  # noqa: F401  (re-exported)
    StallSettings,
    attach,
    count_inputs,
    group_addresses,
    group_names,
    set_enabled,
    settings_of,
)
from tfdist_opt.stall import uneven

_CURRENT: list[inspector_lib.LocalProgress | None] = [None]
_AGREE_TIMEOUT_S = 120.0  # peers reach on_train_begin together (one collective apart)


def abort_collectives(message: str) -> None:
    """Aborts this process's pending and later collectives with DEADLINE_EXCEEDED."""
    context = private_api.eager_context_module()
    errors = private_api.tf_errors_module()
    context.context().abort_collective_ops(errors.DEADLINE_EXCEEDED, message)


@contextlib.contextmanager
def saving():
    """Labels this worker's position `saving` while a save runs."""
    local = _CURRENT[0]
    if local is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = local.label("saving")
    try:
        yield
    finally:
        local.label(previous)


class _Front(keras.callbacks.Callback):
    """First in the list: callbacks start."""

    async_safe = True  # never turns Keras's async batch-end dispatch off

    def __init__(self, watch):
        super().__init__()
        self._s = watch

    def on_train_begin(self, logs=None):
        self._s.agree_on_epoch_length(self.params.get("steps"))

    def on_epoch_begin(self, epoch, logs=None):
        # A new iterator per epoch: count its batches from here (the last
        # epoch's iterator may have produced batches nobody used).
        self._s.rebase()
        self._s.local.enter("callbacks")

    def on_train_batch_begin(self, batch, logs=None):
        self._s.local.enter("callbacks", step=self._s.steps + 1)
        self._s.first_batch = batch

    def on_train_batch_end(self, batch, logs=None):
        s = self._s
        s.steps += batch - s.first_batch + 1
        if s.real:
            s.real_steps += batch - s.first_batch + 1
        if threading.current_thread() is threading.main_thread():
            s.local.enter("callbacks")

    def on_test_begin(self, logs=None):
        self._s.local.enter("validation")

    def on_epoch_end(self, epoch, logs=None):
        self._s.local.enter("callbacks")

    def on_train_end(self, logs=None):
        self._s.local.enter("callbacks")


class _Back(keras.callbacks.Callback):
    """Last in the list: the step starts."""

    async_safe = True

    def __init__(self, watch):
        super().__init__()
        self._s = watch

    def on_train_batch_begin(self, batch, logs=None):
        s = self._s
        # DistributedBackupAndRestore skips restored steps without running
        # the train step (no marker): those never wait for input.
        s.real = not getattr(self.model, SKIPPING_ATTR, False)
        s.goal = s.base + (s.real_steps + 1) * s.replicas if s.real else -1
        s.local.enter("step", step=s.steps + 1)

    def on_test_batch_begin(self, batch, logs=None):
        self._s.local.enter("validation")

    def on_test_end(self, logs=None):
        self._s.local.enter("callbacks")


class _Agree(keras.callbacks.Callback):
    """The uneven-inputs agreement alone (inspector off)."""

    async_safe = True

    def __init__(self, watch):
        super().__init__()
        self._s = watch

    def on_train_begin(self, logs=None):
        self._s.agree_on_epoch_length(self.params.get("steps"))


class FitWatch:
    """One `fit`'s progress state, callbacks and inspector thread."""

    def __init__(self, strategy, settings: StallSettings, store=None, out=None, model=None):
        self.model = model  # whose fit this is (its `runtime.FitCall`)
        self.task, self.names = settings.task, settings.names
        self.tasks = sorted(self.names)
        self.store = store or kv_store.TFKeyValueStore()
        self.ns = inspector_lib.next_namespace()
        self.local = inspector_lib.LocalProgress()
        self.steps = 0  # train steps of this fit (Keras's count)
        self.real_steps = 0  # this epoch's that ran the train step (not skipped)
        self.real = True
        self.first_batch = 0
        self.replicas = max(1, len(strategy.extended.worker_devices))
        self.marker = settings.marker
        self.settings = settings
        self.inspector = None
        if settings.warn_s and self.marker is not None:
            self.rebase()
            self.inspector = inspector_lib.Inspector(
                self.local,
                self.task,
                self.names,
                self.store,
                self.ns,
                settings.warn_s,
                settings.abort_s,
                input_pending=self._pending,
                out=out,
                addresses=settings.addresses,
                collective_timeout_s=settings.collective_timeout_s,
                abort_collectives=abort_collectives,
            )
            self.callbacks = (_Front(self), _Back(self))
        else:
            self.callbacks = (_Agree(self), None)

    def agree_on_epoch_length(self, steps) -> None:
        """Uneven inputs (`tfdist_opt.stall.uneven`): same epoch ends everywhere.

        Then starts the inspector thread: every worker has written its keys
        (`Inspector.create_keys`) before it writes its epoch length here.
        """
        if self.inspector is not None:
            self.inspector.create_keys()
        key = f"{self.ns}/batches/"
        self.store.put(key + str(self.task), "null" if steps is None else str(int(steps)))
        counts = {}
        try:
            for t in self.tasks:
                text = self.store.get(key + str(t), _AGREE_TIMEOUT_S)
                if text is None:
                    return  # a peer never started fit: the inspector names it
                counts[t] = None if text == "null" else int(text)
        finally:
            self.start()
        self._uneven(counts)

    def _uneven(self, counts) -> None:
        warning = uneven.decide(counts, self.names)
        if warning is None:
            return
        epoch_iterator = _fit_epoch_iterator(self.model)
        if epoch_iterator is not None:
            private_api.clear_epoch_length(epoch_iterator)
        if self.task == self.tasks[0]:
            _logging.log_once(warning, warning=True)

    def rebase(self) -> None:
        self.base = int(self.marker.numpy())
        self.real_steps = 0
        self.goal = self.base + self.replicas

    def _pending(self) -> bool:
        return self.settings.counting and int(self.marker.numpy()) < self.goal

    def start(self) -> None:
        if self.inspector is not None and self.inspector._thread is None:  # pylint: disable=protected-access
            _CURRENT[0] = self.local
            self.inspector.start()

    def stop(self) -> None:
        if _CURRENT[0] is self.local:
            _CURRENT[0] = None
        if self.inspector is not None:
            self.inspector.stop()


def _fit_epoch_iterator(model):
    """The `EpochIterator` of `model`'s running `fit` (`runtime.FitCall`)."""
    fit = runtime.FITS.get(model) if model is not None else None
    return None if fit is None else fit.epoch_iterator


def watch_fit(model, args: tuple, kwargs: dict):
    """(args, kwargs, watch or None): `fit`'s arguments with our callbacks.

    The watch's thread starts at `on_train_begin`; call `watch.stop()`
    after `fit`.
    """
    settings = settings_of(getattr(model, "_distribute_strategy", None))
    if settings is None:
        return args, kwargs, None
    if "callbacks" in kwargs or len(args) <= 5:
        user = kwargs.get("callbacks")
    else:
        user = args[5]  # fit(x, y, batch_size, epochs, verbose, callbacks, ...)
    if user is not None and not isinstance(user, (list, tuple)):
        return args, kwargs, None  # a CallbackList: the caller's own container
    watch = FitWatch(model._distribute_strategy, settings, model=model)
    front, back = watch.callbacks
    wrapped = [front, *(user or ()), *([back] if back is not None else [])]
    if "callbacks" in kwargs or len(args) <= 5:
        kwargs = {**kwargs, "callbacks": wrapped}
    else:
        args = (*args[:5], wrapped, *args[6:])
    return args, kwargs, watch
