"""tfdist_opt: fast, painless TensorFlow data-parallel training.

Only pure-Python names are imported eagerly; the TensorFlow-backed ones
(`opt_strategy`, the callbacks, the tf.data builder) load on first use so
`import tfdist_opt` stays cheap and does not initialise TensorFlow.

Subpackages: `tfdist_opt.cluster` (TF_CONFIG, launcher), `tfdist_opt.data`
(pipelines), `tfdist_opt.gradients` (packing, compression, accumulation),
`tfdist_opt.callbacks` (Keras callbacks), `tfdist_opt.model_parallel`
(a model's layer groups on different local devices: `pipeline(...)`).
"""

__version__ = "0.1.0"

from tfdist_opt import _lazy
from tfdist_opt import model_parallel  # TF-free until `pipeline` is used
from tfdist_opt import versions as _versions
from tfdist_opt.launch.local import run_local
from tfdist_opt.cluster.tf_config import apply_tf_config
from tfdist_opt.cluster.tf_config import build_tf_config
from tfdist_opt.strategy.config import StrategyConfig
from tfdist_opt.keras.keras_steps import UnsupportedCombinationError
from tfdist_opt.keras.keras_steps import XlaFallbackWarning
from tfdist_opt.data.options import PipelineOptions
from tfdist_opt.gradients.accumulation.contract import check_batch_contract
from tfdist_opt.gradients.options import GradientOptions
from tfdist_opt.strategy.plan import StrategyPlan
from tfdist_opt.strategy.plan import plan_strategy
from tfdist_opt.strategy.topology import Topology
from tfdist_opt.strategy.topology import detect_topology
from tfdist_opt.strategy.topology import task_type

_LAZY = {
    "BatchSizeFinder": "tfdist_opt.callbacks.batch_size_finder",
    "CommunicationProfiler": "tfdist_opt.callbacks.comm_profiler",
    "DistributedBackupAndRestore": "tfdist_opt.callbacks.backup",
    "KerasMultiWorkerMirroredStrategy": "tfdist_opt.keras.keras_compat",
    "ScaledLearningRate": "tfdist_opt.callbacks.scaled_lr",
    "SidecarEvaluator": "tfdist_opt.evaluation.sidecar",
    "ThroughputMonitor": "tfdist_opt.callbacks.throughput",
    "build_dataset": "tfdist_opt.data.pipeline",
    "build_input": "tfdist_opt.data.pipeline",
    "opt_strategy": "tfdist_opt.strategy.build",
}

__all__ = [
    "BatchSizeFinder",
    "CommunicationProfiler",
    "DistributedBackupAndRestore",
    "GradientOptions",
    "KerasMultiWorkerMirroredStrategy",
    "PipelineOptions",
    "ScaledLearningRate",
    "SidecarEvaluator",
    "StrategyConfig",
    "StrategyPlan",
    "ThroughputMonitor",
    "Topology",
    "UnsupportedCombinationError",
    "XlaFallbackWarning",
    "apply_tf_config",
    "build_dataset",
    "build_input",
    "build_tf_config",
    "check_batch_contract",
    "detect_topology",
    "opt_strategy",
    "plan_strategy",
    "run_local",
    "task_type",
]

__getattr__ = _lazy.lazy_getattr(__name__, _LAZY)

# One warning naming the tested versions if TF/Keras are outside them
# (package metadata only: TensorFlow is not imported).
_versions.warn_if_unsupported()
