"""`fit`, `evaluate`, `predict` for Keras 3 models under parameter servers.

`fit` runs on the chief (the coordinator): each step is scheduled with
`ClusterCoordinator.schedule` on whichever worker is free, workers read and
update the variables on the parameter servers asynchronously, and the
chief joins at each epoch end to collect the epoch's loss and metrics. A
worker that fails has its steps rescheduled on the others by the
coordinator (TF's parameter-server fault tolerance), so every epoch
completes exactly `steps_per_epoch` steps (`history.steps_completed`). A
step that was running on the worker when it died may already have applied
its update on the parameter servers before being rescheduled: TF gives
at-least-once semantics there, so `optimizer.iterations` can exceed the
completed steps by at most the steps in flight on the lost worker
(`steps_per_execution` per worker). `evaluate` and `predict` run on the chief,
in order, reading the variables from the parameter servers.

Callbacks get Keras's usual calls. Up to `2 x workers` steps are in
flight; `on_train_batch_end(i)` runs when step i has completed (in order),
with the epoch's running loss and metrics in `logs`, so per-step callbacks
(progress bar, ThroughputMonitor) see real progress. Epoch logs carry `loss`, the compiled metrics, `val_*`, and
`examples_per_sec` (epoch examples / epoch wall time, join included).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import time

from absl import logging
import keras
import numpy as np
import tensorflow as tf

from tfdist_opt import runtime
from tfdist_opt.parameter_server import data as data_lib
from tfdist_opt.parameter_server import faults
from tfdist_opt.parameter_server import steps as steps_lib


@contextlib.contextmanager
def steps_running(strategy):
    """Marks `strategy`'s coordinator as busy: no model class is swapped.

    `fit`, `evaluate` and `predict` run inside this, where the
    coordinator's threads work; a model noted meanwhile
    (`tfdist_opt.keras.model_registry`) gets its subclass at the next
    scope entry or exit outside training.
    """
    state = runtime.runtime_of(strategy)
    count = state.steps_running
    state.steps_running = count + 1
    try:
        yield
    finally:
        state.steps_running = count


def _steps_running(fn):
    """Runs `fn(model, ...)` inside `steps_running` of the model's strategy."""

    @functools.wraps(fn)
    def wrapper(model, *args, **kwargs):
        with steps_running(model.distribute_strategy):
            return fn(model, *args, **kwargs)

    return wrapper


@_steps_running
def fit(
    model: keras.Model,
    x=None,
    y=None,
    batch_size: int | None = None,
    epochs: int = 1,
    verbose="auto",
    callbacks=None,
    validation_split: float = 0.0,
    validation_data=None,
    shuffle: bool = True,
    class_weight=None,
    sample_weight=None,
    initial_epoch: int = 0,
    steps_per_epoch: int | None = None,
    validation_steps: int | None = None,
    validation_batch_size: int | None = None,
    validation_freq: int = 1,
    seed: int | None = None,
) -> keras.callbacks.History:
    """`model.fit` for parameter-server training (same arguments, same History).

    A model built in `KerasParameterServerStrategy.scope()` runs this from
    its own `model.fit`; this is the explicit form.

    Args:
        model: a Keras 3 model created and compiled in the scope of a
            parameter-server strategy (`tfdist_opt.opt_strategy()` under a
            TF_CONFIG with `ps` tasks, or `InProcessCluster(...).strategy()`).
        x, y, sample_weight: arrays; or `x` a `tf.data.Dataset` of batches, a
            function `input_context -> tf.data.Dataset` run on each worker,
            or a `tfdist_opt.build_dataset(...)` pipeline.
        batch_size: int. Examples per step, with arrays only. Defaults to 32.
        steps_per_epoch: int or None. Steps per epoch; defaults to one pass
            over the data when its size is known on the chief.
        validation_split: float. As Keras: the last fraction of array data is
            held out (ignored when `validation_data` is given).
        validation_data: `(x_val, y_val[, sample_weight])` or a finite
            dataset, evaluated on the chief after each `validation_freq`-th
            epoch (callbacks get `on_test_*` calls, as in Keras).
        class_weight: `{class index: weight}`; as Keras, for a single-output
            `(x, y)` input without sample weights.
        seed: int or None. Shuffle seed for arrays, the same on every worker
            (TF gives PS workers no distinct pipeline id); None: each differs.
        Others: as `keras.Model.fit`. Resumes at the epoch a Keras or
            tfdist_opt `BackupAndRestore` restored.

    Returns:
        `keras.callbacks.History`, with `steps_completed` (steps per epoch).

    Raises:
        ValueError: bad arguments, or a model not built for PS training.
        RuntimeError: a parameter server was lost (one line naming it).
    """
    for name, value, low in (
        ("epochs", epochs, 1),
        ("initial_epoch", initial_epoch, 0),
        ("validation_freq", validation_freq, 1),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(
                f"Invalid value for `{name}`: expected an int >= {low}. Received: {name}={value!r}"
            )
    _refuse_custom_step(model, "train_step")
    if validation_split and validation_data is None:
        (x, y, sample_weight), validation_data = data_lib.split_validation(
            x, y, sample_weight, validation_split
        )
    strategy = model.distribute_strategy
    if not isinstance(strategy, tf.distribute.ParameterServerStrategy):
        steps_lib.prepare(model, None)  # raises the named error
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    per_worker, spec, steps_per_epoch = data_lib.training_input(
        coordinator, x, y, sample_weight, batch_size, steps_per_epoch, shuffle, seed, class_weight
    )
    targets = steps_lib.prepare(model, spec)
    validation = _validation_input(validation_data, validation_batch_size, batch_size)
    spe = int(getattr(model, "steps_per_execution", 1) or 1)
    train_function = steps_lib.make_train_function(model, targets, spe)
    iterator = iter(per_worker)
    verbose = 1 if verbose == "auto" else verbose
    calls = -(-steps_per_epoch // spe)
    cbs = (
        callbacks
        if isinstance(callbacks, keras.callbacks.CallbackList)
        else keras.callbacks.CallbackList(
            callbacks,
            add_history=True,
            add_progbar=verbose != 0,
            verbose=verbose,
            epochs=epochs,
            steps=calls,
            model=model,
        )
    )
    totals = steps_lib.Totals(model)
    # Steps in flight: enough to keep every worker busy; batch-end hooks run
    # as each step completes, in order, so callbacks see real progress.
    window = 2 * max(1, _num_workers(strategy))
    model.stop_training = False
    with runtime.fit_call(model, epochs, initial_epoch, cbs):  # callback order
        cbs.on_train_begin()
    # A BackupAndRestore may move the start epoch: Keras's sets
    # `model._initial_epoch` (and Keras's fit reads it the same way), ours
    # `resume_epoch` (`runtime.ObjectState`).
    initial_epoch = getattr(model, "_initial_epoch", None) or initial_epoch
    state = runtime.OBJECTS.get(model)
    initial_epoch = max(initial_epoch, 0 if state is None else state.resume_epoch)
    logs = {}
    completed: list[int] = []
    with faults.named_ps_failure(strategy):
        for epoch in range(initial_epoch, epochs):
            totals.reset()
            cbs.on_epoch_begin(epoch)
            start = time.perf_counter()
            pending: collections.deque = collections.deque()
            scheduled = 0
            for call in range(calls):
                cbs.on_train_batch_begin(call)
                pending.append((call, coordinator.schedule(train_function, args=(iterator,))))
                scheduled += min(spe, steps_per_epoch - call * spe)
                while len(pending) > window:
                    _finish(cbs, totals, *pending.popleft())
                if model.stop_training:
                    break
            while pending:
                _finish(cbs, totals, *pending.popleft())
            coordinator.join()
            completed.append(scheduled)
            logs = totals.logs()
            elapsed = time.perf_counter() - start
            logs["examples_per_sec"] = totals.count / elapsed if elapsed > 0 else 0.0
            if validation is not None and (epoch + 1) % validation_freq == 0:
                vx, vy, vsw, vbatch = validation
                logs.update(
                    evaluate(
                        model,
                        vx,
                        vy,
                        batch_size=vbatch,
                        sample_weight=vsw,
                        steps=validation_steps,
                        verbose=0,
                        callbacks=cbs,
                        return_dict=True,
                        _prefix="val_",
                    )
                )
            cbs.on_epoch_end(epoch, logs)
            if model.stop_training:
                break
    cbs.on_train_end(logs)
    model.history.steps_completed = completed  # per epoch, each step counted once
    return model.history


def _refuse_custom_step(model, method: str) -> None:
    """A model overriding `train_step`/`test_step`/`predict_step` is refused:
    the coordinator runs its own steps (steps.py) and would skip it."""
    if getattr(type(model), method, None) is not getattr(keras.Model, method):
        raise ValueError(
            f"Invalid value for `model`: {type(model).__name__} overrides "
            f"`{method}`, which parameter-server training does not run (its steps "
            "are scheduled on the workers by the coordinator). Received: a custom "
            f"`{method}`. Expected keras.Model's own; put custom losses in "
            "`compute_loss` or compile()."
        )


def _validation_input(validation_data, validation_batch_size, batch_size):
    """`(x, y, sample_weight, batch_size)` for per-epoch validation, or None."""
    if validation_data is None:
        return None
    vx, vy, vsw = _split_validation(validation_data)
    vbatch = validation_batch_size
    if vbatch is None and data_lib._is_array(vx):  # pylint: disable=protected-access
        vbatch = batch_size
    return vx, vy, vsw, vbatch


def _finish(cbs, totals, call, remote_value):
    """Waits for one step, adds its outputs, then runs the batch-end hooks.

    A step that completed on a worker which died before its outputs were
    copied here has had its update applied, but its loss is gone: it counts
    as completed and is left out of the epoch's loss and metrics (logged).
    """
    try:
        totals.add(*remote_value.fetch())
    except (tf.errors.UnavailableError, tf.errors.AbortedError, tf.errors.CancelledError) as e:
        if faults.ps_task_in(e) is not None:
            raise
        totals.lost += 1
        logging.warning(
            "tfdist_opt: step %d completed on a worker that was then "
            "lost; its update is applied, its loss is left out of the "
            "epoch mean",
            call,
        )
    cbs.on_train_batch_end(call, totals.logs())


def _num_workers(strategy) -> int:
    try:
        return len(strategy.cluster_resolver.cluster_spec().as_dict().get("worker", ()))
    except Exception:  # pylint: disable=broad-except
        return 2


@_steps_running
def evaluate(
    model: keras.Model,
    x=None,
    y=None,
    batch_size: int | None = None,
    verbose="auto",
    sample_weight=None,
    steps: int | None = None,
    callbacks=None,
    return_dict: bool = False,
    _prefix: str = "",
):
    """`model.evaluate` on the chief, reading variables from the parameter servers.

    Args: as `keras.Model.evaluate` (`x` as in `fit`; a dataset function is
    called once on the chief). Callbacks get Keras's `on_test_*` calls.

    Returns:
        The loss, `[loss, *metrics]`, or a dict with `return_dict=True`.
    """
    _refuse_custom_step(model, "test_step")
    dataset = data_lib.chief_dataset(x, y, sample_weight, batch_size, steps)
    steps_lib.prepare(model, dataset.element_spec)
    eval_function = steps_lib.make_eval_function(model)
    cbs = _callback_list(model, callbacks, verbose, steps)
    totals = steps_lib.Totals(model)
    cbs.on_test_begin()
    with faults.named_ps_failure(model.distribute_strategy):
        for step, batch in enumerate(dataset):
            cbs.on_test_batch_begin(step)
            totals.add(*eval_function(batch))
            cbs.on_test_batch_end(step, totals.logs())
    logs = totals.logs()
    cbs.on_test_end(logs)
    logs = {_prefix + k: v for k, v in logs.items()}
    if return_dict:
        return logs
    values = list(logs.values())
    return values[0] if len(values) == 1 else values


@_steps_running
def predict(
    model: keras.Model,
    x,
    batch_size: int | None = None,
    verbose="auto",
    steps: int | None = None,
    callbacks=None,
):
    """`model.predict` on the chief, in input order. Returns numpy array(s).

    Callbacks get Keras's `on_predict_*` calls (`logs={"outputs": ...}`).
    """
    _refuse_custom_step(model, "predict_step")
    dataset = data_lib.chief_dataset(x, None, None, batch_size, steps)
    x_spec = keras.utils.unpack_x_y_sample_weight(dataset.element_spec)[0]
    steps_lib.prepare(model, (x_spec,), build_metrics=False)
    cbs = _callback_list(model, callbacks, verbose, steps)

    @tf.function
    def predict_function(batch):
        xb = keras.utils.unpack_x_y_sample_weight(batch)[0]
        return model(xb, training=False)

    outputs = []
    cbs.on_predict_begin()
    with faults.named_ps_failure(model.distribute_strategy):
        for step, batch in enumerate(dataset):
            cbs.on_predict_batch_begin(step)
            outputs.append(tf.nest.map_structure(np.asarray, predict_function(batch)))
            cbs.on_predict_batch_end(step, {"outputs": outputs[-1]})
    cbs.on_predict_end()
    return tf.nest.map_structure(lambda *parts: np.concatenate(parts), *outputs)


def _callback_list(model, callbacks, verbose, steps):
    """Keras's CallbackList for evaluate/predict (the one fit passes, as is)."""
    if isinstance(callbacks, keras.callbacks.CallbackList):
        return callbacks
    verbose = 1 if verbose == "auto" else verbose
    return keras.callbacks.CallbackList(
        callbacks, add_progbar=verbose != 0, verbose=verbose, epochs=1, steps=steps, model=model
    )


def _split_validation(validation_data):
    if isinstance(validation_data, (tuple, list)):
        if len(validation_data) not in (2, 3):
            raise ValueError(
                "Invalid value for `validation_data`: expected (x, y) or "
                "(x, y, sample_weight) or a dataset. Received: a "
                f"{len(validation_data)}-tuple."
            )
        vx, vy, *rest = validation_data
        return vx, vy, rest[0] if rest else None
    return validation_data, None, None
