"""TensorBoard output under multi-worker: the chief writes, the others don't.

Keras's own `keras.callbacks.TensorBoard` has no notion of workers: under
MultiWorkerMirroredStrategy every worker writes its own event files into the
same `log_dir` (file names differ by host and pid), so TensorBoard shows
each curve once per worker. The values are the same on every worker
(`fit` reduces metrics across replicas), so one writer is enough:

- `ChiefTensorBoard(log_dir, ...)` is `keras.callbacks.TensorBoard` on the
  chief (worker 0 without a chief, or a single process) and does nothing on
  the other workers (no files, no directories). TensorBoard's callback runs
  no collective ops, so skipping it on some workers cannot stall the others.
- `ScalarWriter` is how `ThroughputMonitor(log_dir=...)` and
  `CommunicationProfiler(log_dir=...)` write their scalars: chief only, with
  the scalars plugin's metadata (what `tf.summary.scalar` writes, without
  needing the `tensorboard` package to write).

Viewing them needs the `tensorboard` package (TensorFlow 2.21 no longer
depends on it): `pip install "tfdist_opt[tensorboard]"`, then
`tensorboard --logdir LOG_DIR`.
"""

from __future__ import annotations

import os
import threading
from typing import Mapping

import keras
import tensorflow as tf
from tensorflow.core.framework import summary_pb2

from tfdist_opt.callbacks import _common
from tfdist_opt.strategy import topology as topology_lib

_SCALAR_METADATA = summary_pb2.SummaryMetadata(
    plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars")
).SerializeToString()


# One event file per log_dir per process, shared by every ScalarWriter:
# two files in one folder with interleaved steps make TensorBoard report
# out-of-order steps. abspath -> [tf.summary writer, users].
_SHARED: dict[str, list] = {}
_LOCK = threading.Lock()


def _acquire(log_dir: str):
    key = os.path.abspath(log_dir)
    with _LOCK:
        entry = _SHARED.get(key)
        if entry is None:
            entry = _SHARED[key] = [tf.summary.create_file_writer(log_dir), 0]
        entry[1] += 1
        return key, entry[0]


def _release(key: str) -> None:
    with _LOCK:
        entry = _SHARED[key]
        entry[0].flush()
        entry[1] -= 1
        if entry[1] == 0:
            entry[0].close()
            del _SHARED[key]


class ScalarWriter:
    """Scalars `PREFIX/NAME` into `log_dir`, on the chief only.

    Writers on the same `log_dir` in one process share one event file.

    Args:
        log_dir: str or None. None (or a non-chief task) writes nothing.
        chief: bool or None. Whether this task writes. Defaults to `None`:
            this process's TF_CONFIG role.
    """

    def __init__(self, log_dir: str | None, chief: bool | None = None):
        chief = _common.is_chief() if chief is None else chief
        self._key, self._writer = _acquire(log_dir) if log_dir and chief else (None, None)

    @property
    def active(self) -> bool:
        return self._writer is not None

    def write(self, prefix: str, values: Mapping[str, float | None], step: int) -> None:
        """Writes each non-None value as a float32 scalar at `step`."""
        if self._writer is None:
            return
        with self._writer.as_default(step=step):
            for key in sorted(values):
                if values[key] is not None:
                    tf.summary.write(
                        f"{prefix}/{key}",
                        tf.constant(values[key], tf.float32),
                        metadata=_SCALAR_METADATA,
                    )

    def close(self) -> None:
        if self._writer is not None:
            _release(self._key)
            self._writer = None


class ChiefOnlyTensorBoard:
    """Mixin in front of `keras.callbacks.TensorBoard`: writes on the chief only.

    This task writes when it is the chief by TF_CONFIG and by the model's
    strategy (`topology.strategy_is_chief`); elsewhere `set_model` creates
    no writer and every hook returns at once. Also swapped onto Keras's own
    `TensorBoard` instances by `tfdist_opt.strategy.saving.chief_callbacks`.
    """

    def set_model(self, model):
        self.writes = self._decide_writes(model)
        if self.writes:
            super().set_model(model)
        else:  # the plain Callback's: remember the model, create nothing
            keras.callbacks.Callback.set_model(self, model)

    def _decide_writes(self, model) -> bool:
        """The chief rule; Keras's own TensorBoard under our strategy's `fit`
        gets the one-writer-per-storage rule instead (`chief_callbacks`)."""
        return _common.is_chief() and topology_lib.strategy_is_chief(
            getattr(model, "distribute_strategy", None)
        )

    def _skip(self) -> bool:
        return not getattr(self, "writes", True)


def _chief_only(name):
    def hook(self, *args, **kwargs):
        if self._skip():
            return None
        return getattr(super(ChiefOnlyTensorBoard, self), name)(*args, **kwargs)

    hook.__name__ = name
    hook.__doc__ = f"`TensorBoard.{name}` on the chief; nothing elsewhere."
    return hook


for _hook in (
    "on_train_begin",
    "on_train_end",
    "on_test_begin",
    "on_test_end",
    "on_train_batch_begin",
    "on_train_batch_end",
    "on_test_batch_begin",
    "on_test_batch_end",
    "on_epoch_begin",
    "on_epoch_end",
):
    setattr(ChiefOnlyTensorBoard, _hook, _chief_only(_hook))
del _hook


class ChiefTensorBoard(ChiefOnlyTensorBoard, keras.callbacks.TensorBoard):
    """`keras.callbacks.TensorBoard` that writes on the chief only.

    Same arguments as `keras.callbacks.TensorBoard`. On the chief it is
    that callback unchanged; on other workers every hook returns at once.
    Put it after the tfdist_opt callbacks that write into `logs` (its
    `epoch_examples_per_sec`, `epoch_comm_fraction` curves come from them).

    Example:
        >>> tb = ChiefTensorBoard("logs/run1")  # doctest: +SKIP
        >>> model.fit(ds, callbacks=[ThroughputMonitor(64, log_dir="logs/run1"), tb])
    """
