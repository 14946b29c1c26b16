"""Strategies: config, topology, the pure plan, and one module per kind.

Pure (no TensorFlow at import): `config` (`StrategyConfig`), `topology`
(`Topology`), `plan` (`plan_strategy`), `kinds` (the `Kind` registry and
each kind's plan). TensorFlow bindings, imported on use: `build`
(`opt_strategy`), `keras_compat` (the Keras 3 fixes), `host_memory`, and
each kind's `build`.
"""

from tfdist_opt import _lazy
from tfdist_opt.strategy.config import StrategyConfig
from tfdist_opt.strategy.kinds import Kind
from tfdist_opt.strategy.plan import StrategyPlan
from tfdist_opt.strategy.plan import plan_strategy
from tfdist_opt.strategy.topology import Topology
from tfdist_opt.strategy.topology import detect_topology

_LAZY = {
    "KerasMultiWorkerMirroredStrategy": "tfdist_opt.strategy.keras_compat",
    "opt_strategy": "tfdist_opt.strategy.build",
}

__all__ = [
    "Kind",
    "KerasMultiWorkerMirroredStrategy",
    "StrategyConfig",
    "StrategyPlan",
    "Topology",
    "detect_topology",
    "opt_strategy",
    "plan_strategy",
]

__getattr__ = _lazy.lazy_getattr(__name__, _LAZY)
