"""`PipelineModel`: a Keras model whose layer groups live on different devices.

Each stage (a Keras layer, or a list of layers made into a Sequential) is
built under `tf.device(stage_device)`, so its variables live there, and is
called through `stage.stage_call`, so its forward and backward ops run
there. `train_step` splits each batch into `micro_batches` slices that flow
through the stages (GPipe, Huang et al. 2019): each slice's gradients are
computed with its own tape and summed on the variable's device, weighted by
the slice's share of the batch, so the update equals the one-device update
on the whole batch. The optimizer is built on the model's variables in
`compile`, because slots built lazily inside `fit` all land on the default
device (TF 2.21); built up front they sit beside their variables.

References:
    Huang et al. 2019, "GPipe: Efficient Training of Giant Neural Networks
    using Pipeline Parallelism", arXiv:1811.06965.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from tfdist_opt.model_parallel import plan as plan_lib
from tfdist_opt.model_parallel import cross_worker
from tfdist_opt.model_parallel.stage import stage_call

_JIT_ERROR = (
    "Invalid value for `jit_compile`: a pipeline model cannot be XLA-compiled. "
    "XLA compiles the step for one device and loses the stage placement (TF "
    '2.21: "Trying to access resource ... located in device CPU:1 from '
    'device CPU:0"). Expected jit_compile=False (or "auto", which is '
    "turned off here). Received: jit_compile={!r}"
)


@keras.saving.register_keras_serializable(package="tfdist_opt")
class PipelineModel(keras.Model):
    """Stages on devices, micro-batched training. Build with `pipeline()`.

    Args:
        stages: list of keras.Layer. One per device, applied in order.
        devices: list of str. One device per stage.
        input_shape: tuple. Per-example input shape (no batch dimension).
        micro_batches: int. Slices per batch in `train_step`. Defaults to `1`.
        cross_worker: bool. All-reduce gradients across the TF_CONFIG
            workers (each runs this pipeline on its local devices on its own
            shard of the data). Defaults to `False`.
    """

    def __init__(self, stages, devices, input_shape, micro_batches=1, cross_worker=False, **kwargs):
        super().__init__(**kwargs)
        self.stages = list(stages)
        self.stage_devices = list(devices)
        self.example_shape = tuple(input_shape)
        self.micro_batches = plan_lib.validate_micro_batches(micro_batches)
        self.cross_worker = bool(cross_worker)
        shape = (None, *self.example_shape)
        for s, (layer, device) in enumerate(zip(self.stages, self.stage_devices)):
            if not layer.built:
                with tf.device(device):
                    layer.build(shape)
            _check_placement(layer, device, s)
            if not layer.weights:
                raise ValueError(
                    f"Stage {s} ({layer.name!r}) has no variables; every stage "
                    "needs at least one, or it has nothing to place. Merge it "
                    "into a neighbouring stage."
                )
            shape = layer.compute_output_shape(shape)
        self.build((None, *self.example_shape))

    def build(self, input_shape):
        del input_shape
        self.built = True

    def call(self, x, training=False):
        for layer, device in zip(self.stages, self.stage_devices):
            with tf.device(device):
                x = layer(x, training=training)
        return x

    # ------------------------------------------------------------ compile
    def compile(self, optimizer="rmsprop", *args, jit_compile="auto", **kwargs):
        if jit_compile not in (False, "auto"):
            raise ValueError(_JIT_ERROR.format(jit_compile))
        super().compile(optimizer, *args, jit_compile=False, **kwargs)
        if self.optimizer is not None:
            # Slots beside their variables: each slot is created from its
            # reference variable, here, not lazily inside the first step.
            self.optimizer.build(self.trainable_variables)

    def compile_from_config(self, config):
        # Keras skips this for an overridden `compile` (and warns); ours
        # only adds checks, so a loaded model is compiled as saved.
        self.compile(**keras.saving.deserialize_keras_object(config))

    def _check_jit(self):
        if self.jit_compile:
            raise ValueError(_JIT_ERROR.format(self.jit_compile))

    def fit(self, *args, **kwargs):
        self._check_jit()
        if self.cross_worker:
            cross_worker.broadcast_variables(self.stage_variables(), self.stage_devices)
        return super().fit(*args, **kwargs)

    def evaluate(self, *args, **kwargs):
        self._check_jit()
        return super().evaluate(*args, **kwargs)

    def predict(self, *args, **kwargs):
        self._check_jit()
        return super().predict(*args, **kwargs)

    # --------------------------------------------------------- train step
    def stage_variables(self):
        """Per stage, its floating-point variables (trainable and not)."""
        return [[w for w in layer.weights if "float" in str(w.dtype)] for layer in self.stages]

    def train_step(self, data):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        batch = tf.shape(x)[0]
        tf.debugging.assert_greater_equal(
            batch,
            self.micro_batches,
            message=f"batch smaller than micro_batches={self.micro_batches}",
        )
        per_stage = [list(layer.trainable_variables) for layer in self.stages]
        sums = [[None] * len(vs) for vs in per_stage]
        preds, loss_total = [], 0.0
        batch_f = tf.cast(batch, tf.float32)
        for m in range(self.micro_batches):
            lo = batch * m // self.micro_batches
            hi = batch * (m + 1) // self.micro_batches
            xm, ym = x[lo:hi], tf.nest.map_structure(lambda t: t[lo:hi], y)
            swm = None if sample_weight is None else sample_weight[lo:hi]
            share = tf.cast(hi - lo, tf.float32) / batch_f
            with tf.GradientTape() as tape:
                h = xm
                for s, (layer, device) in enumerate(zip(self.stages, self.stage_devices)):
                    h = stage_call(layer, device, h, training=True, input_grad=s > 0)
                loss = self.compute_loss(x=xm, y=ym, y_pred=h, sample_weight=swm, training=True)
                scaled = self.optimizer.scale_loss(loss * share)
            flat = [v for vs in per_stage for v in vs]
            grads = tape.gradient(scaled, flat)
            k = 0
            for s, vs in enumerate(per_stage):
                with tf.device(self.stage_devices[s]):
                    for i in range(len(vs)):
                        g = grads[k + i]
                        sums[s][i] = g if sums[s][i] is None else sums[s][i] + g
                k += len(vs)
            preds.append(h)
            loss_total += loss * share
        if self.cross_worker:
            sums = cross_worker.all_reduce_mean(sums, self.stage_devices)
        flat_vars = [v for vs in per_stage for v in vs]
        flat_grads = [g for gs in sums for g in gs]
        self.optimizer.apply_gradients(zip(flat_grads, flat_vars))
        y_pred = tf.concat(preds, axis=0)
        # Keras's own loss tracker (what `fit` logs as "loss").
        self._loss_tracker.update_state(loss_total, sample_weight=batch)
        return self.compute_metrics(x, y, y_pred, sample_weight=sample_weight)

    # ------------------------------------------------------------- saving
    def get_config(self):
        return {
            "name": self.name,
            "stages": [keras.saving.serialize_keras_object(s) for s in self.stages],
            "devices": list(self.stage_devices),
            "input_shape": list(self.example_shape),
            "micro_batches": self.micro_batches,
            "cross_worker": self.cross_worker,
        }

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        stages = []
        for stage_config, device in zip(config["stages"], config["devices"]):
            with tf.device(device):  # a built stage's variables go here
                stages.append(
                    keras.saving.deserialize_keras_object(
                        stage_config, custom_objects=custom_objects
                    )
                )
        config["stages"] = stages
        return cls(**config)


def same_device(a: str, b: str) -> bool:
    """Whether two device strings name the same device type and index."""
    sa, sb = tf.DeviceSpec.from_string(a), tf.DeviceSpec.from_string(b)
    return (sa.device_type or "").upper() == (sb.device_type or "").upper() and (
        (sa.device_index or 0) == (sb.device_index or 0)
    )


def _check_placement(layer, device, s):
    for w in layer.weights:
        if not same_device(w.value.device, device):
            raise ValueError(
                f"Stage {s} ({layer.name!r}) was built before it was placed: "
                f"variable {w.path!r} is on {w.value.device}, not {device}. Pass "
                "unbuilt layers (or let `pipeline()` clone built ones)."
            )
