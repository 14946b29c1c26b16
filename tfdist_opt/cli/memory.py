"""`tfdist-opt memory`: what fits one replica, per memory setting.

    tfdist-opt memory model.keras --device-memory 16GiB
    tfdist-opt memory mypkg.models:build --device-memory 512MiB --replicas 1,2,4

Reads the model (a `.keras` file, or `module:function` returning a Keras
model, compiled or not) and prints, per replica and for each memory setting
and replica count, the bytes of parameters, gradients, optimizer state, the
sharded step's transient and an activation estimate, then the smallest
setting that fits. The math is `tfdist_opt.gradients.zero.memory_plan` (pure);
this module only reads the Keras model.
"""

from __future__ import annotations

import argparse
import importlib
import math
import sys

from tfdist_opt.gradients.zero import memory_plan


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tfdist-opt memory",
        description="Per-replica memory of a Keras model under each memory setting.",
    )
    p.add_argument("model", help="a .keras file, or module:function returning a Keras model")
    p.add_argument(
        "--device-memory", required=True, help="one replica's memory, e.g. 16GiB, 512MiB"
    )
    p.add_argument("--replicas", default="1,2,4,8", help="replica counts, comma-separated")
    p.add_argument(
        "--optimizer",
        default=None,
        help="optimizer class name when the model is not compiled (default: adam)",
    )
    p.add_argument("--batch-size", type=int, default=32, help="examples per replica")
    p.add_argument(
        "--bucket-bytes",
        type=int,
        default=memory_plan.DEFAULT_BUCKET_BYTES,
        help="shard_bucket_bytes (the sharded step's bucket)",
    )
    return p


def load_model(spec: str):
    """A Keras model from a `.keras` path or a `module:function` factory."""
    import keras

    if spec.endswith(".keras") or spec.endswith(".h5"):
        return keras.saving.load_model(spec)
    module, sep, func = spec.partition(":")
    if not sep or not module or not func:
        raise ValueError(
            "Invalid value for `model`: expected a .keras file or module:function. "
            f"Received: {spec!r}"
        )
    model = getattr(importlib.import_module(module), func)()
    if not isinstance(model, keras.Model):
        raise TypeError(
            f"Invalid value for `model`: expected {spec} to return a keras.Model. "
            f"Received: {type(model).__name__}"
        )
    return model


def variables_of(model) -> list[memory_plan.Variable]:
    """The trainable variables as `memory_plan.Variable`s."""
    return [
        memory_plan.Variable(math.prod(int(d) for d in v.shape), _itemsize(v.dtype))
        for v in model.trainable_variables
    ]


def _itemsize(dtype) -> int:
    import numpy as np

    name = str(getattr(dtype, "name", dtype))
    return 2 if name == "bfloat16" else np.dtype(name).itemsize


def activation_bytes_per_example(model) -> int | None:
    """Sum of every layer's output bytes for one example (None: unknown).

    Known for models with symbolic outputs (Sequential with an `Input`,
    functional); a subclassed model's layers have none.
    """
    import keras

    total = 0
    for layer in _layers(model):
        try:
            outputs = keras.tree.flatten(layer.output)
        except (AttributeError, ValueError):
            return None
        for t in outputs:
            dims = [int(d) for d in t.shape[1:] if d is not None]
            if len(dims) != len(t.shape) - 1:
                return None
            total += math.prod(dims) * _itemsize(t.dtype)
    return total


def _layers(model):
    import keras

    for layer in model.layers:
        if isinstance(layer, keras.Model):  # a nested Sequential / functional model
            yield from _layers(layer)
        else:
            yield layer


def slots_of(model, optimizer_name: str | None) -> tuple[str, int]:
    """(optimizer name, slots per variable) of the compiled model, or by name."""
    opt = getattr(model, "optimizer", None)
    if opt is not None and optimizer_name is None:
        inner = getattr(opt, "inner_optimizer", opt)
        name = type(inner).__name__
        return name, memory_plan.slots_for(
            name,
            momentum=float(getattr(inner, "momentum", 0.0) or 0.0),
            centered=bool(getattr(inner, "centered", False)),
            amsgrad=bool(getattr(inner, "amsgrad", False)),
        )
    name = optimizer_name or "adam"
    return name, memory_plan.slots_for(name)


def _replicas(text: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        out = []
    if not out or any(n < 1 for n in out):
        raise ValueError(
            "Invalid value for `--replicas`: expected comma-separated counts >= 1. "
            f"Received: {text!r}"
        )
    return out


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    try:
        device = memory_plan.parse_bytes(args.device_memory)
        replicas = _replicas(args.replicas)
        if args.batch_size < 1:
            raise ValueError(
                f"Invalid value for `--batch-size`: expected >= 1. Received: {args.batch_size}"
            )
        if args.optimizer is not None:
            memory_plan.slots_for(args.optimizer)
    except ValueError as e:
        print(f"tfdist-opt memory: {e}", file=sys.stderr)
        return 2
    model = load_model(args.model)
    name, slots = slots_of(model, args.optimizer)
    per_example = activation_bytes_per_example(model)
    act = (per_example or 0) * args.batch_size
    variables = variables_of(model)
    rows = memory_plan.plan(variables, slots, replicas, device, act, args.bucket_bytes)
    params = sum(v.num_elements for v in variables)
    print(
        f"model: {args.model}: {params:,} trainable parameters; optimizer {name}: {slots} slot(s)"
    )
    print(
        "activations: every layer's output x "
        f"{args.batch_size} examples per replica"
        + ("" if per_example is not None else " (unknown for this model: counted as 0)")
    )
    print("MiB per replica:")
    print(memory_plan.format_table(rows, device))
    return 0
