"""Parameter-server training for Keras 3 (`tfdist_opt.parameter_server`).

Keras 3 has no ClusterCoordinator support (keras-team/keras#18624, #20585);
this package supplies it:

- `fit` / `evaluate` / `predict` (training.py): `model.fit`'s arguments,
  a Keras `History`; steps scheduled on workers by `ClusterCoordinator`.
- `KerasParameterServerStrategy` (strategy.py): TF's strategy; a Keras 3
  model built in its scope runs `fit` / `evaluate` / `predict` here from its
  own `model.fit` / ... (keras_model.py, a per-instance class swap).
- `InProcessCluster` (cluster.py): worker and ps servers in this process.
- `BackupAndRestore` (backup.py): checkpoints model + optimizer (sharded
  variables included) every epoch; a restarted job resumes from the last.
- `serve` (serving.py): what worker and ps tasks run (`opt_strategy()`
  calls it on those tasks).
- variables.py: exact `optimizer.iterations` under asynchronous workers,
  gradients per shard of sharded variables, placement checks.
"""

from tfdist_opt import _lazy

_LAZY = {
    "BackupAndRestore": "tfdist_opt.parameter_server.backup",
    "InProcessCluster": "tfdist_opt.parameter_server.cluster",
    "KerasParameterServerError": "tfdist_opt.parameter_server.strategy",
    "KerasParameterServerStrategy": "tfdist_opt.parameter_server.strategy",
    "ParameterServerLostError": "tfdist_opt.parameter_server.faults",
    "evaluate": "tfdist_opt.parameter_server.training",
    "fit": "tfdist_opt.parameter_server.training",
    "placement": "tfdist_opt.parameter_server.variables",
    "predict": "tfdist_opt.parameter_server.training",
    "serve": "tfdist_opt.parameter_server.serving",
}

__all__ = [
    "BackupAndRestore",
    "InProcessCluster",
    "KerasParameterServerError",
    "KerasParameterServerStrategy",
    "ParameterServerLostError",
    "evaluate",
    "fit",
    "placement",
    "predict",
    "serve",
]

__getattr__ = _lazy.lazy_getattr(__name__, _LAZY)
