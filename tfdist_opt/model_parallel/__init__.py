"""Model parallelism: a model's layer groups on different local devices.

`pipeline(stages, devices="auto", micro_batches=M)` returns a Keras model
whose stages each keep their variables, forward ops, backward ops and
optimizer slots on their own device, with GPipe micro-batching and, on a
multi-worker TF_CONFIG, gradients all-reduced across workers. Pure
placement decisions live in `plan` (no TensorFlow); `model` and
`build` are the TensorFlow binding, imported on first use.
"""

from tfdist_opt import _lazy
from tfdist_opt.model_parallel.plan import StagePlan
from tfdist_opt.model_parallel.plan import balanced_split
from tfdist_opt.model_parallel.plan import resolve_devices
from tfdist_opt.model_parallel.plan import split_at_names

_LAZY = {
    "PipelineModel": "tfdist_opt.model_parallel.model",
    "layer_bytes": "tfdist_opt.model_parallel.build",
    "pipeline": "tfdist_opt.model_parallel.build",
}

__all__ = [
    "PipelineModel",
    "StagePlan",
    "balanced_split",
    "layer_bytes",
    "pipeline",
    "resolve_devices",
    "split_at_names",
]

__getattr__ = _lazy.lazy_getattr(__name__, _LAZY)
