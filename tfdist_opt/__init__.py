"""tfdist_opt: fast, painless TensorFlow data-parallel training.

Only pure-Python names are imported eagerly; the TensorFlow-backed ones
(`opt_strategy`, `KerasMultiWorkerMirroredStrategy`) load on first use so
`import tfdist_opt` stays cheap and does not initialise TensorFlow.
"""

__version__ = "0.1.0"

from tfdist_opt.config import StrategyConfig
from tfdist_opt.plan import StrategyPlan
from tfdist_opt.plan import plan_strategy
from tfdist_opt.topology import Topology
from tfdist_opt.topology import detect_topology

_LAZY = {
    "opt_strategy": "tfdist_opt.strategy",
    "KerasMultiWorkerMirroredStrategy": "tfdist_opt.keras_compat",
}

__all__ = [
    "KerasMultiWorkerMirroredStrategy",
    "StrategyConfig",
    "StrategyPlan",
    "Topology",
    "detect_topology",
    "opt_strategy",
    "plan_strategy",
]


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tfdist_opt' has no attribute {name!r}")
