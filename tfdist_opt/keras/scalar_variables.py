"""`int()` and `float()` of a scalar variable that a strategy mirrors.

`tf.Variable` defines `__int__` and `__float__`; TF's distributed variables
(`MirroredVariable`, `SyncOnReadVariable`) forward attribute reads to their
per-device variable, but Python looks these two up on the type, so
`int(model.optimizer.iterations)` or `float(optimizer.learning_rate)` (Keras
variables convert through their backing variable) raised "int() argument
must be ... not 'MirroredVariable'" under any multi-replica strategy, where
one device gives the number. Callbacks do this routinely.

While our strategy's scope is entered, `creator` (a
`tf.variable_creator_scope` creator inside the strategy's own) gives each
scalar distributed variable a per-instance subclass (`_class_swap`) with
both, reading the value as `read_value()` does in cross-replica context
(a mirrored variable's value; a sync-on-read variable's aggregate).
Variables of other shapes convert through numpy as before.
"""

from __future__ import annotations

from tfdist_opt import _class_swap


class ScalarConvertible:
    """Mixin: `int(v)` and `float(v)` of a scalar distributed variable."""

    def __int__(self):
        return int(self.read_value())

    def __float__(self):
        return float(self.read_value())


def creator(next_creator, **kwargs):
    """A variable creator: the strategy's variable, scalar ones convertible."""
    import tensorflow as tf

    variable = next_creator(**kwargs)
    if isinstance(variable, tf.distribute.DistributedValues) and variable.shape.rank == 0:
        variable.__class__ = _class_swap.cached_subclass(ScalarConvertible, type(variable))
    return variable
