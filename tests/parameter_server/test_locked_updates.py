"""Adam's update as one locked fused op (tfdist_opt/parameter_server/locked_updates.py).

In-process, no cluster: the fused update equals Keras's Adam, and a traced
update is one `ResourceApplyAdam(use_locking=True)` per variable (the race it
closes needs two workers; tests/parameter_server/test_training.py's sharded
embedding scenario is where it showed).
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tfdist_opt.parameter_server import locked_updates


def _pair(**kwargs):
    keras_adam = keras.optimizers.Adam(0.05, **kwargs)
    locked = keras.optimizers.Adam(0.05, **kwargs)
    assert locked_updates.lock_adam_updates(locked)
    return keras_adam, locked


def _variables():
    rng = np.random.default_rng(0)
    return [
        tf.Variable(rng.normal(size=(6, 3)).astype("float32")),
        tf.Variable(rng.normal(size=(3,)).astype("float32")),
    ]


def _gradients(step, sparse):
    rng = np.random.default_rng(step + 1)
    table = rng.normal(size=(6, 3)).astype("float32")
    if sparse:  # rows 1 and 4 only, as an embedding's gradient
        dense = tf.IndexedSlices(
            tf.constant(table[[1, 4]]), tf.constant([1, 4]), tf.constant([6, 3])
        )
    else:
        dense = tf.constant(table)
    return [dense, tf.constant(rng.normal(size=(3,)).astype("float32"))]


@pytest.mark.parametrize("amsgrad", [False, True])
@pytest.mark.parametrize("sparse", [False, True])
def test_locked_update_equals_keras_adam(amsgrad, sparse):
    keras_adam, locked = _pair(amsgrad=amsgrad)
    ref, got = _variables(), _variables()
    for step in range(4):
        keras_adam.apply(_gradients(step, sparse), ref)
        locked.apply(_gradients(step, sparse), got)
    for r, g in zip(ref, got):
        np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=1e-5, atol=1e-6)
    for r, g in zip(keras_adam.variables, locked.variables):
        np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=1e-5, atol=1e-7)
    assert int(locked.iterations.numpy()) == 4


def test_each_update_is_one_locked_fused_kernel():
    _, locked = _pair()
    variables = _variables()

    @tf.function
    def apply(grads):
        locked.apply(grads, variables)

    graph = apply.get_concrete_function(_gradients(0, False)).graph
    fused = [op for op in graph.get_operations() if op.type == "ResourceApplyAdam"]
    assert len(fused) == len(variables)
    assert all(op.get_attr("use_locking") for op in fused)
    # No separate slot or variable writes left to interleave: the one write
    # is Keras's `iterations.assign_add` (made atomic under PS by
    # variables.make_counter_atomic).
    writes = [
        op.type
        for op in graph.get_operations()
        if op.type in ("AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp")
    ]
    assert writes == ["AssignVariableOp"]


def test_other_optimizers_and_custom_adam_steps_are_left_alone():
    class MyAdam(keras.optimizers.Adam):
        def update_step(self, gradient, variable, learning_rate):
            return super().update_step(gradient, variable, learning_rate)

    for opt in (keras.optimizers.SGD(0.1), keras.optimizers.RMSprop(), MyAdam()):
        cls = type(opt)
        assert not locked_updates.lock_adam_updates(opt)
        assert type(opt) is cls
    adamw = keras.optimizers.AdamW(0.01)
    assert locked_updates.lock_adam_updates(adamw)
    assert locked_updates.lock_adam_updates(adamw)  # idempotent
    assert type(adamw).__name__ == "AdamW"  # saving records Keras's class
