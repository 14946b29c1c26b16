"""Keras's `steps_per_execution` loop, with the step inlined: works multi-worker.

`compile(steps_per_execution=N)` runs N steps per call of the train (or
test) function: Keras 3's TF trainer (`keras/src/backend/tensorflow/
trainer.py`, `_make_function`) builds a `tf.while_loop` whose body calls
`one_step_on_data`, itself a `tf.function`, inside a `tf.cond` on "the
iterator has another batch". Under `MultiWorkerMirroredStrategy` that
nested function's graph loses a captured input when it is placed in the
cond branch of the while body: the first call fails with
`InvalidArgumentError: You must feed a value for placeholder tensor
'.../while/cond/Placeholder'` (2 workers, TF 2.21, Keras 3.15; Mirrored and
one device run it). The same loop with the step traced directly into the
loop body (no nested `tf.function`) runs, and equals N = 1 step by step.

`make_function(model, step)` is that loop: Keras's own structure
(`get_next_as_optional`, stop at the end of the data or after N steps, the
outputs of the last step executed), the per-replica `step` run with
`strategy.run` and its outputs reduced by Keras's own `reduce_per_replica`,
all in one outer `tf.function`. `keras_steps.KerasSteps` uses it for models
under a multi-worker strategy with `steps_per_execution > 1`.
"""

from __future__ import annotations

from tfdist_opt import private_api


def make_function(model, step):
    """A train/test function for `model` running `step` per replica, N per call.

    Args:
        model: a Keras 3 model; `model.steps_per_execution` (N) is read when
            the function is traced, as Keras does.
        step: callable(data) -> logs, run on each replica (Keras's
            `train_step`/`test_step`, or `keras_steps`'s compiled one).

    Returns:
        callable(iterator) -> logs of the last step run; raises
        `StopIteration` when the iterator had no batch left (what Keras's
        `fit`/`evaluate` loops expect).
    """
    import keras
    import tensorflow as tf

    def one_step_on_data(data):
        data = keras.tree.map_structure(
            lambda t: None if isinstance(t, tf.experimental.Optional) else t, data
        )
        strategy = model.distribute_strategy
        outputs = strategy.run(step, args=(data,))
        return private_api.reduce_per_replica(outputs, strategy, reduction="auto")

    def multi_step_on_iterator(iterator):
        n = model.steps_per_execution
        empty = tf.experimental.Optional.empty(None)  # spec set when traced

        def cond(i, outputs, next_inputs):
            return tf.logical_and(tf.less(i, n), next_inputs.has_value())

        def body(i, outputs, next_inputs):
            def run_step():
                new = tf.experimental.Optional.from_value(one_step_on_data(next_inputs.get_value()))
                empty._element_spec = new.element_spec  # pylint: disable=protected-access
                return new

            def keep():
                outputs._element_spec = empty._element_spec  # pylint: disable=protected-access
                return outputs

            outputs = tf.cond(
                tf.logical_and(tf.less(i, n), next_inputs.has_value()), run_step, keep
            )
            next_inputs = tf.cond(
                tf.less(i + 1, n), iterator.get_next_as_optional, lambda: next_inputs
            )
            return i + 1, outputs, next_inputs

        _, final, _ = tf.while_loop(
            cond, body, [tf.constant(0), empty, iterator.get_next_as_optional()]
        )
        final._element_spec = empty.element_spec  # pylint: disable=protected-access
        return final

    compiled = tf.function(multi_step_on_iterator, reduce_retracing=True)

    def function(iterator):
        outputs = compiled(iterator)
        if not outputs.has_value():
            raise StopIteration
        return outputs.get_value()

    return function
