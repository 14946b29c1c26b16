"""Keras's `RematScope` in `fit` on TensorFlow: layers called with keyword arguments.

A layer created inside `keras.RematScope` is rematerialized: at every call
Keras wraps its `call` in the backend's `remat`, on TensorFlow
`tf.recompute_grad` (`Operation.rematerialized_call`), and calls the
wrapper with the layer's arguments, keyword arguments included
(`training=`, `mask=`, whatever the user's `call` declares). Inside a
`tf.function`, which every `fit`, `evaluate` and `predict` step is,
`tf.recompute_grad`'s `tf.custom_gradient` refuses keyword arguments ("The
custom_gradient decorator currently supports keywords arguments only when
eager execution is enabled"): a residual block with `call(self, x,
training=None)`, the usual signature of a block with dropout, fails on its
first step. Plain Keras on the TensorFlow backend fails the same way.

`bind_keyword_arguments(model)` gives each such layer of a model a
per-instance subclass whose `rematerialized_call` hands Keras a function
of positional arguments only: non-tensor keyword values (`training=True`)
are bound into it, tensor keyword values are passed positionally, so
their gradients still flow through `tf.recompute_grad`. What is
recomputed, and the math, are Keras's own.

Only the call is changed: a layer that was not created in a `RematScope`
is left as it is, and so is `RematScope(mode="full")` around layers that
themselves call sub-layers with keyword arguments (Keras raises that error
while the functional model is built, before any strategy sees it).
"""

from __future__ import annotations

from tfdist_opt import _class_swap


class KeywordRemat:
    """Mixin: rematerialized calls take keyword arguments inside `tf.function`."""

    def rematerialized_call(self, fn, *args, **kwargs):
        keras_wraps = super().rematerialized_call

        def call(*positional, **keywords):
            if not keywords:
                return keras_wraps(fn, *args, **kwargs)(*positional)
            import tensorflow as tf

            tensors = [k for k, v in keywords.items() if tf.is_tensor(v)]
            bound = {k: v for k, v in keywords.items() if k not in tensors}
            n = len(positional)

            def positional_only(*flat):
                return fn(*flat[:n], **bound, **dict(zip(tensors, flat[n:])))

            wrapped = keras_wraps(positional_only, *args, **kwargs)
            return wrapped(*positional, *(keywords[k] for k in tensors))

        return call


def bind_keyword_arguments(model) -> int:
    """Swaps the class of every layer of `model` created in a `RematScope`.

    Args:
        model: `keras.Model`. Its nested layers are looked at (itself too).

    Returns:
        int. How many layers have the mixin now.
    """
    swapped = 0
    for layer in model._flatten_layers(include_self=True):
        if getattr(layer, "_remat_mode", None) is None:
            continue
        layer.__class__ = _class_swap.cached_subclass(KeywordRemat, type(layer))
        swapped += 1
    return swapped
