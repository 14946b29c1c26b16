"""`grad_accum` against the length of a Keras `fit`, before step 1, for every input.

With `grad_accum = k` the optimizer steps once every k train steps, so a
`fit` of fewer steps (fewer than k minus the micro-steps a restored cycle
already holds) trains nothing: `iterations` stays 0 and the weights do not
move. `contract.check_updates_per_fit` does the arithmetic; this module
finds the numbers and runs it at the one moment they are all known.

Where: Keras 3's TF trainer turns every input kind (arrays, dicts of
arrays, `tf.data`, generators, `PyDataset`) into a `tf.data` dataset and
distributes it with `strategy.experimental_distribute_dataset`; an input
that is already distributed (`build_dataset`, or the user's own
`distribute_datasets_from_function`) comes from the strategy too. `watch`
wraps both methods on this one strategy instance, and each distributed
dataset they return gets its class swapped (`_class_swap.cached_subclass`)
to one whose `__iter__` runs `before_epoch` first. Keras iterates the
distributed dataset once in `_maybe_symbolic_build` (skipped here) and
then at the first epoch's start, after `callbacks.on_train_begin()` (so a
`BackupAndRestore` has restored the epoch and the optimizer's micro-step
counter) and before step 1. The model's per-instance `fit` recorded the
fit (`runtime.FitCall`): Keras's `EpochIterator` (`num_batches`:
`steps_per_epoch`, or the input's length), `epochs` and `initial_epoch`
(moved by a restore: Keras's `model._initial_epoch`). Models built under
a strategy from `opt_strategy()` have that `fit`; others are not checked.

Raise or warn:

- The length is known before step 1 (arrays and dicts of arrays, a
  `PyDataset` with `__len__`, `tf.data` of known cardinality,
  `build_dataset` inputs of known size, or any input with
  `steps_per_epoch`): `ValueError` before step 1.
- The length is unknown until the input runs out (a generator, `tf.data`
  of unknown cardinality such as after `filter`, a `dataset_fn` source of
  no stated size, all without `steps_per_epoch`): it cannot be known
  before step 1. An absl warning says so once; at the second epoch's start
  (Keras has counted the first epoch) the check runs on that count and
  warns (`UserWarning` + absl), since steps have already run.
"""

from __future__ import annotations

import collections.abc
import threading
import warnings
import weakref

from absl import logging

from tfdist_opt import _class_swap
from tfdist_opt import _logging
from tfdist_opt import private_api
from tfdist_opt import runtime
from tfdist_opt.gradients.accumulation import contract

# EpochIterator -> the fit's starting numbers while the check waits for a
# length (unknown-length inputs), or None once checked.
_FITS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


class FitLengthChecked(collections.abc.Iterable):
    """Mixin in front of a `tf.distribute` dataset class: checks on `iter()`.

    Based on `collections.abc.Iterable` (as TF's distributed datasets are)
    and without `__slots__`: CPython 3.11 refused the `__class__` swap
    ("object layout differs") for a mixin based on `object` alone, with or
    without `__slots__ = ()`, and for this one with `__slots__ = ()`.
    """

    def __iter__(self):
        state = runtime.OBJECTS.get(self)
        before_epoch(1 if state is None else state.grad_accum, self)
        return super().__iter__()


def checked(dataset, grad_accum: int):
    """`dataset` (a distributed dataset), checked against each fit it feeds."""
    try:
        runtime.OBJECTS.of(dataset).grad_accum = grad_accum
        dataset.__class__ = _class_swap.cached_subclass(FitLengthChecked, type(dataset))
    except (TypeError, AttributeError) as e:
        _logging.log_once(
            f"tfdist_opt grad_accum={grad_accum}: fit lengths are not checked "
            f"for {type(dataset).__name__} inputs ({e})",
            warning=True,
        )
    return dataset


def watch(strategy, grad_accum: int) -> None:
    """Makes the datasets `strategy` distributes check fit lengths.

    Wraps `experimental_distribute_dataset` and
    `distribute_datasets_from_function` on this instance (after any
    wrapper already there); `keras_binding.detach` removes them.
    """
    for name in ("experimental_distribute_dataset", "distribute_datasets_from_function"):
        original = getattr(strategy, name)

        def distribute(*args, _original=original, **kwargs):
            return checked(_original(*args, **kwargs), grad_accum)

        setattr(strategy, name, distribute)


def before_epoch(grad_accum: int, dataset=None) -> None:
    """Runs the check when `fit` starts iterating `dataset`, its training data.

    Raises:
        ValueError: the fit's length is known and it applies no update.
    """
    if grad_accum <= 1:
        return
    fit = _calling_fit(dataset)
    if fit is None:
        return
    model, epoch_iterator, call = fit
    with _LOCK:
        first = epoch_iterator not in _FITS
        start = _FITS.get(epoch_iterator)
        if first:
            # Keras starts at `model._initial_epoch or initial_epoch` (a
            # restore sets the former at on_train_begin, before this).
            initial = private_api.initial_epoch(model) or call.initial_epoch
            start = {
                "epochs": call.epochs,
                "initial_epoch": int(initial or 0),
                "pending": _pending_micro_steps(model),
            }
            _FITS[epoch_iterator] = start
    if start is None:  # checked already
        return
    steps = epoch_iterator.num_batches
    if not first and steps is not None:
        # Keras counts the failed fetch that ended an epoch of unknown
        # length as a step; the optimizer's micro-step counter does not.
        steps = _pending_micro_steps(model) - start["pending"] or steps
    if steps is None:
        _logging.log_once(
            f"tfdist_opt grad_accum={grad_accum}: this fit's input has no "
            "known length (a generator, or tf.data of unknown cardinality, "
            "without steps_per_epoch), so whether it runs the "
            f"{grad_accum} steps one update needs is checked only after its "
            "first epoch. Pass steps_per_epoch to have it checked before "
            "step 1.",
            warning=True,
        )
        return
    with _LOCK:
        _FITS[epoch_iterator] = None
    line = contract.check_updates_per_fit(
        grad_accum,
        steps,
        start["epochs"],
        start["initial_epoch"],
        pending_micro_steps=start["pending"],
    )
    if line is None:
        return
    if not line.startswith("Invalid value"):
        logging.warning(line)
    elif first:
        raise ValueError(line)
    else:
        logging.warning(line)
        warnings.warn(line, UserWarning, stacklevel=2)


def _calling_fit(dataset):
    """`(model, epoch_iterator, FitCall)` when a Keras `fit` iterates
    `dataset` as its training data; None for evaluate/predict, the symbolic
    build, or a model whose `fit` is not recorded.

    Keras gives the dataset no hint which call iterates it: the fit's
    record (`runtime.FitCall`, kept by the model's per-instance `fit` and
    `_maybe_symbolic_build`) holds its `EpochIterator`, whose distributed
    dataset must be this one.
    """
    for model, fit in runtime.FITS.items():
        epoch_iterator = fit.epoch_iterator
        if (
            epoch_iterator is not None
            and not fit.building
            and private_api.distributed_dataset_of(epoch_iterator) is dataset
        ):
            return model, epoch_iterator, fit
    return None


def _pending_micro_steps(model) -> int:
    """Micro-steps already accumulated by the model's optimizer (a resumed
    cycle: restored before the first epoch starts)."""
    optimizer = getattr(model, "optimizer", None)
    counter = getattr(optimizer, "_iterations", None)
    if counter is None or not getattr(optimizer, "built", False):
        return 0
    try:
        return int(counter.numpy())
    except (AttributeError, TypeError, ValueError, RuntimeError):
        return 0
