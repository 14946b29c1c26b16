"""Keras callbacks for distributed training (`tfdist_opt.callbacks`).

One callback per module; the TF-free modules (`lr_math`, `stats`,
`ordering`) import without TensorFlow, so the callback classes load on
first use:

- `ThroughputMonitor` (throughput.py): examples/sec, step-time percentiles.
- `ScaledLearningRate` (scaled_lr.py): linear scaling rule + warmup.
- `DistributedBackupAndRestore` (backup.py): chief-aware, atomic,
  mid-epoch resume, NaN-safe; SIGTERM = coordinated preemption save on
  every worker at one step, then exit 42 (preemption.py).
- `CommunicationProfiler` (comm_profiler.py): `comm_fraction`.
- `ChiefTensorBoard` (summaries.py): Keras's TensorBoard, chief only.
- `BatchSizeFinder` / `BatchSizeResult` (batch_size_finder.py).
- `ordered` / `check_order` (ordering.py): callback order rules.
"""

from tfdist_opt import _lazy
from tfdist_opt.callbacks.ordering import check_order
from tfdist_opt.callbacks.ordering import ordered

_LAZY = {
    "BatchSizeFinder": "tfdist_opt.callbacks.batch_size_finder",
    "BatchSizeResult": "tfdist_opt.callbacks.batch_size_finder",
    "ChiefTensorBoard": "tfdist_opt.callbacks.summaries",
    "CommunicationProfiler": "tfdist_opt.callbacks.comm_profiler",
    "DistributedBackupAndRestore": "tfdist_opt.callbacks.backup",
    "ScaledLearningRate": "tfdist_opt.callbacks.scaled_lr",
    "ThroughputMonitor": "tfdist_opt.callbacks.throughput",
}

__all__ = [
    "BatchSizeFinder",
    "BatchSizeResult",
    "ChiefTensorBoard",
    "CommunicationProfiler",
    "DistributedBackupAndRestore",
    "ScaledLearningRate",
    "ThroughputMonitor",
    "check_order",
    "ordered",
]

__getattr__ = _lazy.lazy_getattr(__name__, _LAZY)
