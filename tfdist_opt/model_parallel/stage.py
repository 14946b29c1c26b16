"""One pipeline stage: a Keras layer pinned, forward and backward, to a device.

Calling layers under `tf.device(d)` puts their variables and forward ops on
`d`, but the backward ops that `GradientTape` builds later (outside that
scope) land on the default device: on TF 2.21 every backward MatMul of a
stage on CPU:1 ran on CPU:0 (placer log
`gradient_tape/stage1_1/MatMul/MatMul ... CPU:0`). `stage_call` wraps the
stage in `tf.custom_gradient` whose forward records its own tape inside
`tf.device(d)` and whose gradient function computes the stage's gradients
inside `tf.device(d)` too, so both directions run on the stage's device.
"""

from __future__ import annotations

import tensorflow as tf


def stage_call(layer, device: str, x, training: bool, input_grad: bool = True):
    """`layer(x, training=...)` on `device`, with its backward on `device` too.

    Args:
        layer: keras.Layer. The stage (already built on `device`).
        device: str. Where the stage runs.
        x: tf.Tensor. The stage's input (one tensor).
        training: bool. Passed to the layer.
        input_grad: bool. Whether to compute the gradient for `x` (False for
            the first stage, whose input is data). Defaults to `True`.

    Returns:
        The stage's output tensor.
    """

    @tf.custom_gradient
    def run(inp):
        with tf.device(device):
            with tf.GradientTape(watch_accessed_variables=True) as tape:
                tape.watch(inp)
                out = layer(inp, training=training)
        if not isinstance(out, tf.Tensor):
            raise TypeError(
                f"Invalid stage output: stage {layer.name!r} must return one "
                f"tensor (it feeds the next stage). Received: {type(out).__name__}"
            )

        def grad(dy, variables=None):
            variables = list(variables or [])
            sources = ([inp] if input_grad else []) + variables
            with tf.device(device):
                grads = tape.gradient(
                    out, sources, output_gradients=dy, unconnected_gradients="zero"
                )
            dx = grads[0] if input_grad else None
            return dx, grads[len(grads) - len(variables) :]

        return out, grad

    return run(x)
