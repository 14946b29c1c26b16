"""Adam under asynchronous workers: each variable's update is one locked op.

Keras 3's `Adam.update_step` updates a variable with three separate ops on
its parameter server (keras/src/optimizers/adam.py, Keras 3.15): `m += ...`,
`v += ...`, then `var -= alpha * m / (sqrt(v) + epsilon)`, reading `m` and
`v` again. Two workers updating one variable at once interleave those ops:
worker B can read `m` after worker A added its gradient and `v` before A's
square reached it. For a row that had `v == 0` (an embedding row seen for the
first time) B then divides A's momentum by `epsilon` (1e-7) and moves the
row by ~1e3. Seen on TF 2.21 + Keras 3.15 with an in-process cluster (2
workers, 2 ps), a 1M x 4 sharded `Embedding` and `Adam(0.01)`: in about one
run in four under load, ~60 rows of one shard reached |value| 77 and the
epoch losses went 28.6 -> 61.8 instead of 0.42 -> 0.24 (the loss was right
in the other runs, and with one worker).

`lock_adam_updates(optimizer)` makes each update one
`ResourceApplyAdam` (or `ResourceApplyAdamWithAmsgrad`) kernel with
`use_locking=True`, TensorFlow's fused Adam: it holds the locks of `var`,
`m` and `v` while it updates all three, so updates of one variable from
different workers run one after the other and never see each other half
done (what TF1 / tf.keras parameter-server training used). The math is
Keras's: `alpha = lr * sqrt(1 - beta_2**t) / (1 - beta_1**t)`, `m += (g -
m) * (1 - beta_1)`, `v += (g**2 - v) * (1 - beta_2)`, `var -= alpha * m /
(sqrt(v) + epsilon)` with `t = iterations + 1`. A sparse gradient
(`IndexedSlices`, an embedding's) is made dense first, as Keras's Adam
does (`gradient - m`); rows listed twice in one gradient are summed before
squaring (dense Adam; Keras's sparse path squares each copy).

Only `keras.optimizers.Adam` and subclasses that keep its `update_step`
(`AdamW`: its weight decay is a separate `assign_sub`, already one op) are
changed. Other optimizers keep Keras's update ops.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from tfdist_opt import _class_swap
from tfdist_opt.parameter_server import variables as variables_lib


def lock_adam_updates(optimizer) -> bool:
    """Makes an Adam optimizer update each variable with one locked fused op.

    The optimizer's class is swapped for a subclass of its own class that
    overrides only `update_step`; idempotent. Call after `optimizer.build`.

    Args:
        optimizer: a Keras 3 optimizer.

    Returns:
        bool. True if the optimizer now uses locked updates (it is an Adam
        whose `update_step` is Keras's), False if it was left as it is.

    Example:
        >>> opt = keras.optimizers.Adam(0.01)  # doctest: +SKIP
        >>> lock_adam_updates(opt)
        True
    """
    cls = type(optimizer)
    if issubclass(cls, _LockedAdam):
        return True
    if (
        not isinstance(optimizer, keras.optimizers.Adam)
        or cls.update_step is not keras.optimizers.Adam.update_step
    ):
        return False
    optimizer.__class__ = _class_swap.cached_subclass(_LockedAdam, cls)
    return True


class _LockedAdam:
    """`update_step` as TF's fused, locked Adam kernel (see the module doc)."""

    def update_step(self, gradient, variable, learning_rate):
        index = self._get_variable_index(variable)
        var = variables_lib.raw(variable)
        dtype = var.dtype
        if isinstance(gradient, tf.IndexedSlices):
            gradient = tf.convert_to_tensor(gradient)
        gradient = tf.cast(gradient, dtype)
        local_step = tf.cast(self.iterations + 1, dtype)
        beta_1 = tf.cast(self.beta_1, dtype)
        beta_2 = tf.cast(self.beta_2, dtype)
        args = dict(
            var=var.handle,
            m=variables_lib.raw(self._momentums[index]).handle,
            v=variables_lib.raw(self._velocities[index]).handle,
            beta1_power=tf.pow(beta_1, local_step),
            beta2_power=tf.pow(beta_2, local_step),
            lr=tf.cast(learning_rate, dtype),
            beta1=beta_1,
            beta2=beta_2,
            epsilon=tf.cast(self.epsilon, dtype),
            grad=gradient,
            use_locking=True,
        )
        if self.amsgrad:
            return tf.raw_ops.ResourceApplyAdamWithAmsgrad(
                vhat=variables_lib.raw(self._velocity_hats[index]).handle, **args
            )
        return tf.raw_ops.ResourceApplyAdam(use_nesterov=False, **args)
