"""Learning-rate arithmetic for data-parallel training (pure Python, no TF).

The linear scaling rule and gradual warmup of Goyal et al. 2017, and the
momentum correction that keeps SGD-with-momentum consistent when the
learning rate changes. `ScaledLearningRate` holds these; they are plain
functions so they can be tested (and reasoned about) without TensorFlow.

References:
    Goyal et al., "Accurate, Large Minibatch SGD: Training ImageNet in 1
    Hour", 2017 (https://arxiv.org/abs/1706.02677), sections 2.1-2.2.
"""

from __future__ import annotations

from typing import Callable

from tfdist_opt import validation


def linear_scaled_lr(base_lr: float, global_batch_size: int, base_batch_size: int) -> float:
    """The linear scaling rule: `base_lr * global_batch_size / base_batch_size`.

    Args:
        base_lr: float. Learning rate tuned for `base_batch_size`.
        global_batch_size: int. Examples per optimizer step, all replicas.
        base_batch_size: int. Batch size `base_lr` was tuned for.

    Returns:
        The scaled learning rate.

    Example:
        >>> linear_scaled_lr(0.1, 1024, 256)
        0.4
    """
    validation.check_number("base_lr", base_lr, allow_zero=True)
    validation.check_int("global_batch_size", global_batch_size, 1)
    validation.check_int("base_batch_size", base_batch_size, 1)
    return base_lr * global_batch_size / base_batch_size


def warmup_lr(step: int, start_lr: float, target_lr: float, warmup_steps: int) -> float:
    """Gradual (linear) warmup from `start_lr` at step 0 to `target_lr`.

    `step` counts optimizer updates already applied (the value of
    `optimizer.iterations` before the update that uses this rate). At
    `step >= warmup_steps` the result is `target_lr`.

    Example:
        >>> warmup_lr(5, 0.1, 0.4, 10)
        0.25
    """
    validation.check_int("step", step, 0)
    validation.check_int("warmup_steps", warmup_steps, 0)
    if step >= warmup_steps:
        return target_lr
    return start_lr + (target_lr - start_lr) * step / warmup_steps


def scheduled_lr(
    step: int,
    base_lr: float,
    scaled_lr: float,
    warmup_steps: int,
    after_warmup: Callable[[int], float] | None = None,
) -> float:
    """The full schedule: warmup `base_lr -> scaled_lr`, then `scaled_lr * f(step)`.

    Args:
        step: int. Optimizer updates already applied (global, across epochs
            and restarts: `optimizer.iterations`).
        base_lr: float. Rate at step 0 (Goyal et al. start warmup at the
            unscaled rate).
        scaled_lr: float. Rate reached at `warmup_steps`.
        warmup_steps: int. Length of the linear ramp (0: none).
        after_warmup: callable or None. `f(step) -> multiplier` applied to
            `scaled_lr` from `warmup_steps` on (e.g. step decay). Defaults to
            a constant 1.

    Returns:
        The learning rate for the update numbered `step`.
    """
    if step < warmup_steps:
        return warmup_lr(step, base_lr, scaled_lr, warmup_steps)
    factor = 1.0 if after_warmup is None else float(after_warmup(step))
    return scaled_lr * factor


def momentum_correction(previous_lr: float, new_lr: float) -> float:
    """Factor to multiply the momentum buffer by when the rate changes.

    For updates of the form `v <- m*v - lr*g; w <- w + v` (Keras `SGD`), the
    buffer `v` carries the old rate; Goyal et al. (section 2.2, eq. 10) scale
    it by `new_lr / previous_lr` so the change takes effect consistently.
    Returns 1.0 when the rate did not change or the previous rate was 0.

    Example:
        >>> momentum_correction(0.1, 0.2)
        2.0
    """
    if previous_lr == 0 or previous_lr == new_lr:
        return 1.0
    return new_lr / previous_lr


def epochs_to_steps(epochs: float, steps_per_epoch: int) -> int:
    """Warmup given in (possibly fractional) epochs, as whole optimizer steps."""
    validation.check_number("warmup_epochs", epochs, allow_zero=True)
    validation.check_int("steps_per_epoch", steps_per_epoch, 1)
    return int(round(epochs * steps_per_epoch))
