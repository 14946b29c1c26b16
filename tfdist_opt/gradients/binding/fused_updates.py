"""Keras 3 SGD and Adam updates as one fused TensorFlow kernel per variable.

Keras 3's `SGD.update_step` with momentum runs four element-wise ops per
variable (`m * momentum`, `g * lr`, their difference assigned to `m`,
`var += m`) and Adam's about ten, each a separate pass over memory
(keras/src/optimizers/sgd.py, adam.py, Keras 3.15). TensorFlow has one
kernel for each that reads the variable, its slots and the gradient once:

* `ResourceApplyKerasMomentum`: `accum = accum * momentum - lr * grad`,
  then `var += accum` (Nesterov: `var += accum * momentum - lr * grad`),
  Keras's SGD exactly; momentum 0 is `ResourceApplyGradientDescent`
  (`var -= lr * grad`);
* `ResourceApplyAdam` / `ResourceApplyAdamWithAmsgrad`: `alpha = lr *
  sqrt(1 - beta_2**t) / (1 - beta_1**t)`, `m += (g - m) * (1 - beta_1)`,
  `v += (g**2 - v) * (1 - beta_2)`, `var -= alpha * m / (sqrt(v) +
  epsilon)` with `t = iterations + 1`, Keras's Adam.

One kernel per variable instead of Keras's chain of ops roughly halves a
CPU update (docs/benchmarks-appendix.md, "Figures behind the gradient path's
design"), which shows on a CPU-bound step. Results equal
Keras's to float rounding (the kernels may contract multiply-adds):
`tests/gradients/test_fused_updates.py` compares 20 steps at rtol 1e-6.

`apply_fused` is used by the hooked optimizers (`hooks.GradientHooks`)
when `GradientOptions.fused_updates` is on, the optimizer's `update_step`
is Keras's own `SGD` or `Adam` one (a subclass that overrides it keeps its
own), the gradient is dense, and the variable is a TF resource variable
(ZeRO's shard views and sparse gradients keep Keras's ops).
"""

from __future__ import annotations

import keras
import tensorflow as tf

_FUSED_DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64)


def kind_of(optimizer) -> str | None:
    """ "sgd" or "adam" when `optimizer` updates with Keras's own step."""
    step = _own_update_step(type(optimizer))
    if step is keras.optimizers.SGD.update_step:
        return "sgd"
    if step is keras.optimizers.Adam.update_step:
        return "adam"
    return None


def apply_fused(optimizer, gradient, variable, learning_rate) -> bool:
    """One fused update of `variable`, or False when Keras's ops must run.

    Args:
        optimizer: a hooked Keras 3 optimizer (see `kind_of`).
        gradient: the reduced gradient.
        variable: what Keras's `update_step` gets (a TF variable, or the
            per-device component of a distributed one).
        learning_rate: the current learning rate.

    Returns:
        bool: True if the update ran here.
    """
    kind = kind_of(optimizer)
    handle = getattr(variable, "handle", None)
    if (
        kind is None
        or handle is None
        or isinstance(gradient, tf.IndexedSlices)
        or variable.dtype not in _FUSED_DTYPES
    ):
        return False
    dtype = variable.dtype
    index = optimizer._get_variable_index(variable)
    lr = tf.cast(learning_rate, dtype)
    gradient = tf.cast(gradient, dtype)
    if kind == "sgd":
        if optimizer.momentum == 0:
            tf.raw_ops.ResourceApplyGradientDescent(var=handle, alpha=lr, delta=gradient)
            return True
        tf.raw_ops.ResourceApplyKerasMomentum(
            var=handle,
            accum=slot_handle(optimizer.momentums[index]),
            lr=lr,
            grad=gradient,
            momentum=tf.cast(optimizer.momentum, dtype),
            use_nesterov=bool(optimizer.nesterov),
        )
        return True
    args = adam_args(optimizer, index, dtype, lr, gradient, slot_handle)
    if optimizer.amsgrad:
        tf.raw_ops.ResourceApplyAdamWithAmsgrad(
            var=handle, vhat=slot_handle(optimizer._velocity_hats[index]), use_locking=False, **args
        )
    else:
        tf.raw_ops.ResourceApplyAdam(var=handle, use_nesterov=False, use_locking=False, **args)
    return True


def adam_args(optimizer, index, dtype, lr, gradient, handle_of) -> dict:
    """The `ResourceApplyAdam` arguments but `var` (and `use_locking`)."""
    local_step = tf.cast(optimizer.iterations + 1, dtype)
    beta_1 = tf.cast(optimizer.beta_1, dtype)
    beta_2 = tf.cast(optimizer.beta_2, dtype)
    return dict(
        m=handle_of(optimizer._momentums[index]),
        v=handle_of(optimizer._velocities[index]),
        beta1_power=tf.pow(beta_1, local_step),
        beta2_power=tf.pow(beta_2, local_step),
        lr=lr,
        beta1=beta_1,
        beta2=beta_2,
        epsilon=tf.cast(optimizer.epsilon, dtype),
        grad=gradient,
    )


def slot_handle(slot):
    """The resource handle of a Keras slot variable on this device."""
    value = slot.value if isinstance(slot, keras.Variable) else slot
    return value.handle


def _own_update_step(cls):
    # The first class in the MRO that is not one of our hook mixins.
    for klass in cls.__mro__:
        if "update_step" in vars(klass) and not vars(klass).get("_tfdist_mixin", False):
            return vars(klass)["update_step"]
    return None
