"""Strategies: config, topology, the pure plan, and one module per kind.

Pure (no TensorFlow at import): `config` (`StrategyConfig`), `topology`
(`Topology`), `plan` (`plan_strategy`), `kinds` (the `Kind` registry and
each kind's plan). TensorFlow bindings, imported on use: `build`
(`opt_strategy`) and each kind's `build`. Sub-packages: `devices` (devices,
CPU and memory settings of a host), `saving` (who writes which file). What
binds Keras to the strategies is the `tfdist_opt.keras` package.
"""

from tfdist_opt import _lazy
from tfdist_opt.strategy.config import StrategyConfig
from tfdist_opt.strategy.kinds import Kind
from tfdist_opt.strategy.plan import StrategyPlan
from tfdist_opt.strategy.plan import plan_strategy
from tfdist_opt.strategy.topology import Topology
from tfdist_opt.strategy.topology import detect_topology

_LAZY = {
    "KerasMultiWorkerMirroredStrategy": "tfdist_opt.keras.keras_compat",
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
