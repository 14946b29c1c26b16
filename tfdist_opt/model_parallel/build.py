"""`pipeline()`: stages (or a Sequential to split) -> a placed `PipelineModel`."""

from __future__ import annotations

import math

import keras
import tensorflow as tf

from tfdist_opt.model_parallel import cross_worker as cross_worker_lib
from tfdist_opt.model_parallel import plan as plan_lib
from tfdist_opt.model_parallel.model import PipelineModel


def layer_bytes(layer) -> int:
    """Bytes of a built layer's variables."""
    return sum(math.prod(w.shape) * tf.as_dtype(w.dtype).size for w in layer.weights)


def _nested_names(layers) -> dict[str, str]:
    nested = {}
    for layer in layers:
        for inner in getattr(layer, "layers", None) or []:
            nested[inner.name] = layer.name
            nested.update({k: layer.name for k in _nested_names([inner])})
    return nested


def _place(layer, device):
    """`layer` if unbuilt, else a copy built on `device` holding its weights."""
    if not layer.built:
        return layer
    with tf.device(device):
        clone = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
        if not clone.built:
            raise ValueError(
                f"Cannot place the built layer {layer.name!r}: its "
                "config does not rebuild it. Pass it unbuilt."
            )
        clone.set_weights(layer.get_weights())
    return clone


def _visible():
    gpus = [d.name for d in tf.config.list_logical_devices("GPU")]
    cpus = [d.name for d in tf.config.list_logical_devices("CPU")]
    return gpus, cpus


def pipeline(
    stages,
    devices="auto",
    micro_batches=1,
    *,
    input_shape=None,
    num_stages=None,
    split_at=None,
    cross_worker="auto",
    name="pipeline",
) -> PipelineModel:
    """A Keras model whose stages run on different local devices.

    Layer-group (pipeline) model parallelism: each stage's variables,
    forward ops and backward ops live on its own device; each training batch
    is split into `micro_batches` slices (GPipe) whose gradients are summed,
    so the update equals the one-device update. The result works with
    `compile`/`fit`/`evaluate`/`predict`/`save` and `keras.models.load_model`.
    This is not tensor parallelism (one layer split across devices): on
    TensorFlow there is none; Keras 3 on JAX has
    `keras.distribution.ModelParallel` for that.

    Args:
        stages: a list of keras.Layer (each a stage; a list of layers becomes
            one Sequential stage), or a `keras.Sequential` to split by
            parameter bytes (or at `split_at`).
        devices: `"auto"` or list of str. `"auto"` uses the visible GPUs, or
            (without GPUs) the logical CPUs, e.g. from `cpu_replicas`.
            Defaults to `"auto"`.
        micro_batches: int. Slices per training batch. Defaults to `1`.
        input_shape: tuple or None. Per-example input shape; taken from a
            built Sequential when None.
        num_stages: int or None. For a Sequential: stages to cut it into.
            Defaults to the number of devices.
        split_at: list of str or None. For a Sequential: names of the layers
            that begin stages 2..n (instead of balancing by bytes).
        cross_worker: bool or `"auto"`. All-reduce gradients across the
            TF_CONFIG workers (each feeds its own data shard). `"auto"`: when
            TF_CONFIG lists more than one worker. Defaults to `"auto"`.
        name: str. The model's name. Defaults to `"pipeline"`.

    Returns:
        A `PipelineModel`.

    Raises:
        ValueError: more stages than devices, a stage with no variables, a
            split point that is not a top-level layer, bad `micro_batches`,
            or a parameter-server TF_CONFIG with `cross_worker`.
        TypeError: `stages` of the wrong type.

    Example:
        >>> import keras, tfdist_opt
        >>> model = tfdist_opt.model_parallel.pipeline(
        ...     [keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)],
        ...     devices="auto", micro_batches=4, input_shape=(16,))
        >>> model.compile("adam", "mse")  # then model.fit(x, y, batch_size=32)
    """
    plan_lib.validate_micro_batches(micro_batches)
    if cross_worker == "auto":
        cross_worker = cross_worker_lib.cluster_workers()[0] > 1
    elif not isinstance(cross_worker, bool):
        raise TypeError(
            "Invalid type for `cross_worker`: expected a bool or "
            f'"auto". Received: cross_worker={cross_worker!r}'
        )
    if cross_worker:
        cross_worker_lib.cluster_workers()  # refuses a parameter-server cluster
        cross_worker_lib.enable()
    gpus, cpus = _visible()
    if isinstance(stages, keras.Sequential):
        layers, input_shape = _split_sequential(
            stages, devices, num_stages, split_at, input_shape, gpus, cpus
        )
    elif isinstance(stages, (list, tuple)):
        if num_stages is not None or split_at is not None:
            raise ValueError(
                "`num_stages`/`split_at` apply to a Sequential model; "
                "a list of stages is already split. Received: "
                f"num_stages={num_stages!r}, split_at={split_at!r}"
            )
        layers = [keras.Sequential(list(s)) if isinstance(s, (list, tuple)) else s for s in stages]
        for s, layer in enumerate(layers):
            if not isinstance(layer, keras.layers.Layer):
                raise TypeError(
                    f"Invalid type for `stages[{s}]`: expected a "
                    f"keras.Layer or a list of them. Received: {layer!r}"
                )
        if not layers:
            raise ValueError(
                "Invalid value for `stages`: expected at least one stage. Received: stages=[]"
            )
    else:
        raise TypeError(
            "Invalid type for `stages`: expected a list of keras "
            "layers or a keras.Sequential. Received: "
            f"{type(stages).__name__}"
        )
    if input_shape is None:
        raise ValueError(
            "Missing `input_shape`: expected the per-example input "
            "shape, e.g. input_shape=(784,). Received: None"
        )
    placed = plan_lib.resolve_devices(devices, len(layers), gpus, cpus)
    layers = [_place(layer, d) for layer, d in zip(layers, placed)]
    return PipelineModel(
        layers,
        placed,
        input_shape,
        micro_batches=micro_batches,
        cross_worker=cross_worker,
        name=name,
    )


def _split_sequential(model, devices, num_stages, split_at, input_shape, gpus, cpus):
    if not model.built:
        raise ValueError(
            f"Cannot split the Sequential {model.name!r}: it is not "
            "built. Give it a keras.Input (or call build) first."
        )
    layers = list(model.layers)
    sizes = [layer_bytes(layer) for layer in layers]
    if split_at is not None:
        plan = plan_lib.split_at_names(
            [la.name for la in layers], sizes, list(split_at), _nested_names(layers)
        )
    else:
        if num_stages is None:
            num_stages = len(devices) if not isinstance(devices, str) else (len(gpus) or len(cpus))
        plan = plan_lib.balanced_split(sizes, num_stages)
    placed = plan_lib.resolve_devices(devices, plan.num_stages, gpus, cpus)
    stages = []
    for s, ((a, b), device) in enumerate(zip(plan.ranges(), placed)):
        # Built layers hold variables on the default device: copy them here.
        stages.append(
            keras.Sequential([_place(la, device) for la in layers[a:b]], name=f"stage{s}")
        )
    if input_shape is None:
        input_shape = tuple(model.input_shape[1:])
    return stages, input_shape
