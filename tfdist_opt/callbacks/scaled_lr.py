"""`ScaledLearningRate`: linear scaling rule + gradual warmup (Goyal et al. 2017)."""

from __future__ import annotations

from typing import Callable

import keras

from tfdist_opt import validation
from tfdist_opt.callbacks import _common
from tfdist_opt.callbacks import lr_math
from tfdist_opt.callbacks.throughput import SKIPPING_ATTR


class ScaledLearningRate(keras.callbacks.Callback):
    """Sets the optimizer's learning rate by the linear scaling rule, with warmup.

    The rate for the update numbered `step` (= `optimizer.iterations`
    before it) is `lr_math.scheduled_lr(step, base_lr, scaled_lr,
    warmup_steps, after_warmup)` with `scaled_lr = base_lr *
    global_batch_size / base_batch_size`: a linear ramp from `base_lr` at
    step 0 to `scaled_lr` at `warmup_steps`, then `scaled_lr *
    after_warmup(step)`. Because the step is the optimizer's own counter,
    which `DistributedBackupAndRestore` restores, the schedule continues
    where it stopped after a resume (it is read at the first batch of each
    `fit`, after every `on_train_begin`, so the order relative to the
    backup callback does not matter). With `steps_per_execution > 1` all
    steps of one execution use the rate of its first step.

    With `momentum_correction=True` (Keras `SGD` with `momentum > 0` only),
    the momentum buffers are multiplied by `new_lr / old_lr` whenever the
    rate changes (Goyal et al., section 2.2), so a warmup does not release
    stale velocity scaled for the old rate.

    The rate is written into `logs` as `lr`. Ordering: before callbacks that
    read `logs`; cannot be combined with `LearningRateScheduler` or
    `ReduceLROnPlateau` (pass a schedule as `after_warmup` instead).

    Args:
        base_lr: float. Learning rate tuned for `base_batch_size`.
        base_batch_size: int. Batch size `base_lr` was tuned for (e.g. 256).
        global_batch_size: int. Examples per step across all replicas.
        warmup_steps: int or None. Ramp length in optimizer steps.
        warmup_epochs: float or None. Ramp length in epochs (converted with
            the `steps` per epoch `fit` reports). Give at most one of the two;
            defaults to no warmup.
        after_warmup: callable or None. `f(step) -> float` multiplier after
            warmup (e.g. a step decay). Defaults to a constant 1.
        momentum_correction: bool. Scale SGD momentum buffers when the rate
            changes. Defaults to `False`.

    Example:
        >>> cb = ScaledLearningRate(base_lr=0.1, base_batch_size=256,  # doctest: +SKIP
        ...                         global_batch_size=1024, warmup_epochs=5)

    References:
        Goyal et al., "Accurate, Large Minibatch SGD: Training ImageNet in 1
        Hour", 2017, https://arxiv.org/abs/1706.02677.
    """

    def __init__(
        self,
        base_lr: float,
        base_batch_size: int,
        global_batch_size: int,
        warmup_steps: int | None = None,
        warmup_epochs: float | None = None,
        after_warmup: Callable[[int], float] | None = None,
        momentum_correction: bool = False,
    ):
        super().__init__()
        self.scaled_lr = lr_math.linear_scaled_lr(base_lr, global_batch_size, base_batch_size)
        if warmup_steps is not None and warmup_epochs is not None:
            raise ValueError(
                "Invalid arguments: give `warmup_steps` or `warmup_epochs`, not "
                f"both. Received: warmup_steps={warmup_steps!r}, "
                f"warmup_epochs={warmup_epochs!r}"
            )
        if warmup_steps is not None:
            validation.check_int("warmup_steps", warmup_steps, 0)
        if warmup_epochs is not None:
            validation.check_number("warmup_epochs", warmup_epochs, allow_zero=True)
        if after_warmup is not None and not callable(after_warmup):
            raise TypeError(
                "Invalid value for `after_warmup`: expected a "
                "callable step -> multiplier or None. Received: "
                f"after_warmup={after_warmup!r}"
            )
        validation.check_bool("momentum_correction", momentum_correction, error=TypeError)
        self.base_lr = base_lr
        self.base_batch_size = base_batch_size
        self.global_batch_size = global_batch_size
        self.warmup_steps = warmup_steps
        self.warmup_epochs = warmup_epochs
        self.after_warmup = after_warmup
        self.momentum_correction = momentum_correction
        self._resolved_warmup = warmup_steps or 0
        self._step = None
        self._current = None
        self._spe = 1

    def lr_at(self, step: int) -> float:
        """The rate this callback sets for the update numbered `step`."""
        return lr_math.scheduled_lr(
            step, self.base_lr, self.scaled_lr, self._resolved_warmup, self.after_warmup
        )

    def on_train_begin(self, logs=None):
        _common.check_fit_order(self.model)
        optimizer = self.model.optimizer
        if callable(getattr(optimizer, "_learning_rate", None)):
            raise ValueError(
                "Invalid optimizer for ScaledLearningRate: its learning rate is "
                "a schedule, which the callback would overwrite. Received: "
                f"learning_rate={optimizer._learning_rate!r}. Expected a float "
                "learning rate; pass the schedule as `after_warmup`."
            )
        if self.momentum_correction and not (
            getattr(optimizer, "momentum", 0) and getattr(optimizer, "momentums", None) is not None
        ):
            raise ValueError(
                "Invalid value for `momentum_correction`: it applies to SGD "
                "with momentum > 0 only. Received: momentum_correction=True with "
                f"{type(optimizer).__name__}"
                f"(momentum={getattr(optimizer, 'momentum', None)!r})."
            )
        if self.warmup_epochs is not None:
            steps = (self.params or {}).get("steps")
            if not steps:
                raise ValueError(
                    "Invalid value for `warmup_epochs`: the steps per epoch are "
                    "unknown (pass `steps_per_epoch` to fit, or use "
                    f"`warmup_steps`). Received: warmup_epochs={self.warmup_epochs!r}"
                )
            self._resolved_warmup = lr_math.epochs_to_steps(self.warmup_epochs, steps)
        self._spe = int(getattr(self.model, "steps_per_execution", 1) or 1)
        self._step = None
        self._current = None

    def on_train_batch_begin(self, batch, logs=None):
        if self._step is None:  # after every on_train_begin (restores) ran
            optimizer = self.model.optimizer
            self._step = int(optimizer.iterations.numpy())
            self._current = float(keras.ops.convert_to_numpy(optimizer.learning_rate))
        lr = self.lr_at(self._step)
        if lr != self._current:
            if self.momentum_correction:
                factor = lr_math.momentum_correction(self._current, lr)
                if factor != 1.0:
                    for v in self.model.optimizer.momentums:
                        v.assign(v * factor)
            self.model.optimizer.learning_rate = lr
            self._current = lr

    def on_train_batch_end(self, batch, logs=None):
        if getattr(self.model, SKIPPING_ATTR, False):
            return
        self._step += self._spe
        if logs is not None:
            logs["lr"] = self._current

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None and self._current is not None:
            logs["lr"] = self._current
