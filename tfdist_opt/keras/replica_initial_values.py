"""Variables first created inside an XLA-compiled `tf.function` on several replicas.

A model without an `Input` creates its variables on its first call. Keras's
`predict` does not build the model before its first step (`fit` and
`evaluate` do), so with `jit_compile=True` that first call runs inside the
per-replica `tf.function(jit_compile=True)` of Keras's predict function
(`predict`, and `predict_on_batch`, which our models run as one `predict`
batch). On one device TensorFlow lifts the variables' initial values out of
the compiled function and initializes them before it runs; XLA has no other
way. Under `tf.distribute.MirroredStrategy` with 2 or more replicas
(plain TF too) it fails: "We failed to lift variable creations out of this
tf.function, so this tf.function cannot be run on XLA".

The cause is how `MirroredStrategy` initializes the copies of a variable on
replicas 1..N-1 inside a function: from a read of replica 0's variable
(`MirroredExtended._get_variable_creator_initial_value`), whose handle is an
input of the function graph, which TF cannot lift. `LiftableInitialValues`
(the per-instance subclass of our mirrored strategy's extended object)
gives each copy the tensor replica 0 was initialized from instead: the same
values (replica 0's variable holds exactly that tensor once initialized),
computed by ops TF can lift, so the function runs on XLA. Where that tensor
is not one of the function being traced (outside a function; a checkpoint
restore on creation; a variable TF does not lift, created under
`init_scope`), the copies read replica 0's variable as upstream.
"""

from __future__ import annotations


class LiftableInitialValues:
    """Mixin in front of `MirroredExtended`: liftable initial values of the copies."""

    def _get_variable_creator_initial_value(self, replica_id, device, primary_var, **kwargs):
        # Called once per replica, in order, each time with `initial_value`
        # set to what it returned for the replica before.
        import tensorflow as tf

        upstream = super()._get_variable_creator_initial_value(
            replica_id, device, primary_var, **kwargs
        )
        if not tf.inside_function():
            return upstream
        if replica_id == 0:
            return _Recorded(upstream)
        previous = kwargs.get("initial_value")
        if not isinstance(previous, (_Recorded, _CopyOf)):
            return upstream
        return _CopyOf(previous.recorded, device, upstream)


class _Recorded:
    """Replica 0's initial value, as given; keeps the tensor it produced."""

    def __init__(self, initial_value):
        self._initial_value = initial_value
        self.recorded = self  # what the copies read `value` from
        self.value = None

    def __call__(self):
        value = self._initial_value() if callable(self._initial_value) else self._initial_value
        self.value = value
        return value


class _CopyOf:
    """A copy's initial value: replica 0's tensor, or upstream's read of its variable."""

    def __init__(self, recorded: _Recorded, device, upstream):
        self.recorded = recorded
        self._device = device
        self._upstream = upstream

    def __call__(self):
        import tensorflow as tf

        value = self.recorded.value
        if (
            tf.inside_function()
            and tf.is_tensor(value)
            and getattr(value, "graph", None) is tf.compat.v1.get_default_graph()
        ):
            with tf.device(self._device):
                return tf.identity(value)
        return self._upstream() if callable(self._upstream) else self._upstream
