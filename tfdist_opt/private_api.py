"""Every private TensorFlow / Keras name tfdist_opt relies on, in one place.

Keras 3 and TF offer no public hook for some of what tfdist_opt does (the
gradient all-reduce, accumulation under tf.distribute, per-replica batch
cardinality, the coordination service's key-value store). Each use is listed
here with the upstream reason; `tests/test_private_api.py` resolves every
entry, so a TF/Keras upgrade that removes or renames one fails there, by
name, instead of deep inside a training step.

Pure Python: `ENTRIES` is data; `missing()` imports what it checks.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

CHECKED_VERSIONS = {"tensorflow": "2.21", "keras": "3.15", "tf_keras": "2.21"}


@dataclasses.dataclass(frozen=True)
class PrivateName:
    """One private name.

    Attributes:
        owner: str. Dotted path of the module or class holding `attr`; a
            trailing `()` means an instance made with no arguments (for
            attributes set in `__init__`).
        attr: str. The attribute (dotted for nested attributes).
        used_in: str. The tfdist_opt module that uses it.
        why: str. Why no public API does, with the upstream issue.
    """

    owner: str
    attr: str
    used_in: str
    why: str


ENTRIES: tuple[PrivateName, ...] = (
    # ---------------------------------------------------------- gradients
    PrivateName("keras.src.backend.tensorflow.optimizer.TFOptimizer",
                "_all_reduce_sum_gradients", "tfdist_opt.gradients.keras_binding",
                "the gradient all-reduce Keras 3 runs under tf.distribute; no "
                "aggregation hook (keras-team/keras#17429)"),
    PrivateName("keras.src.optimizers.loss_scale_optimizer", "LossScaleOptimizer",
                "tfdist_opt.gradients.keras_binding",
                "it delegates to an inner optimizer, which is the one hooked"),
    PrivateName("keras.optimizers.SGD()", "_distribution_strategy",
                "tfdist_opt.gradients.keras_binding",
                "the strategy an optimizer was created under (Keras 3 keeps "
                "it private)"),
    PrivateName("keras.optimizers.SGD()", "_iterations",
                "tfdist_opt.gradients.accumulation",
                "the step counter incremented once per applied update"),
    PrivateName("keras.optimizers.SGD", "_get_variable_index",
                "tfdist_opt.gradients.accumulation",
                "maps a variable to its slot / accumulator index"),
    PrivateName("keras.optimizers.SGD", "_apply_weight_decay",
                "tfdist_opt.gradients.accumulation",
                "weight decay applied once per update under accumulation"),
    # --------------------------------------------------- parameter server
    PrivateName("tensorflow.__internal__.distribute", "ShardedVariable",
                "tfdist_opt.parameter_server.variables",
                "the type of a partitioned variable (variable_partitioner); "
                "TF exports it only under tf.__internal__"),
    PrivateName("keras.Model", "_flatten_layers",
                "tfdist_opt.parameter_server.variables",
                "every nested layer (Model.layers is top-level only), to find "
                "Embedding layers whose table is sharded"),
    PrivateName("keras.Model", "_symbolic_build",
                "tfdist_opt.parameter_server.steps",
                "builds compiled metrics and losses symbolically before any step "
                "is scheduled, as Keras's own fit does (no coordinator support in "
                "Keras 3: keras-team/keras#18624)"),
    PrivateName("keras.Model()", "_compile_metrics",
                "tfdist_opt.parameter_server.steps",
                "the CompileMetrics object whose state steps return statelessly, "
                "so async workers never race on metric variables"),
    # --------------------------------------------------------------- data
    PrivateName("tensorflow.python.distribute.input_lib", "DistributedDataset",
                "tfdist_opt.data.pipeline",
                "its `_cardinality` is set to per-replica steps so Keras does "
                "not warn 'ran out of data' (TF reports per-replica batches)"),
    # --------------------------------------------------------- callbacks
    PrivateName("tensorflow.python.eager.context", "context",
                "tfdist_opt.callbacks.preemption",
                "the coordination service's key-value store "
                "(set/get_config_key_value) has no tf.* export"),
    PrivateName("tensorflow.python.framework.errors", "AlreadyExistsError",
                "tfdist_opt.callbacks.preemption",
                "raised by set_config_key_value for an existing key"),
)


def resolve(entry: PrivateName) -> Any:
    """The object `entry` names; raises AttributeError/ImportError if gone."""
    owner = entry.owner
    instance = owner.endswith("()")
    owner = owner[:-2] if instance else owner
    obj = _import_dotted(owner)
    if instance:
        obj = obj()
    for part in entry.attr.split("."):
        obj = getattr(obj, part)
    return obj


def missing() -> list[str]:
    """One line per entry that no longer resolves (empty when all do)."""
    out = []
    for entry in ENTRIES:
        try:
            resolve(entry)
        except (ImportError, AttributeError) as e:
            out.append(f"{entry.owner}.{entry.attr} (used in {entry.used_in}: "
                       f"{entry.why}): {type(e).__name__}: {e}")
    return out


def _import_dotted(path: str) -> Any:
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for part in parts[i:]:
            obj = getattr(obj, part)
        return obj
    raise ImportError(f"cannot import {path}")
