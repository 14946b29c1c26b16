"""`ThroughputMonitor`: examples/sec and step-time percentiles, chief-printed."""

from __future__ import annotations

import json
import time

import keras

from tfdist_opt import validation
from tfdist_opt.callbacks import _common
from tfdist_opt.callbacks import stats
from tfdist_opt.callbacks import summaries

SKIPPING_ATTR = "_tfdist_opt_skipping"  # set by DistributedBackupAndRestore


class ThroughputMonitor(keras.callbacks.Callback):
    """Measures training throughput at real step completion.

    Each train step is timed from the completion of the previous step (or,
    for the first step of an epoch, from `on_train_batch_begin`) to its own
    completion, so the figures include input and callback time: they are the
    throughput the job really gets. "Completion" is forced in
    `on_train_batch_end` by reading `optimizer.iterations` (one scalar copy
    to the host that cannot finish before the step's update, all-reduce
    included, has run), because Keras may call the hook while the step is
    still executing asynchronously.

    The first `warmup_steps` steps of the run (tracing, compilation,
    allocator warm-up) are not counted. Batches skipped by
    `DistributedBackupAndRestore` on a mid-epoch resume are not counted.

    Written into `logs` after each batch (over the last `window` steps) and
    at each epoch end (over that epoch's counted steps), so `History`, the
    progress bar, `CSVLogger` and `TensorBoard` see them:
    `examples_per_sec`, `examples_per_sec_per_replica`, `step_time_median`,
    `step_time_p90` (seconds). The same values go to TensorBoard scalars under
    `throughput/` when `log_dir` is set. Only the chief prints and writes
    files; every worker computes (and logs) its own figures.

    Ordering: place it before any callback that reads `logs` (TensorBoard,
    CSVLogger, EarlyStopping, ...); `fit` fails at `on_train_begin` with a
    message saying what to move otherwise (see `tfdist_opt.callbacks.ordered`).

    Args:
        global_batch_size: int. Examples per step across all replicas.
        window: int. Steps the per-batch figures cover. Defaults to `20`.
        warmup_steps: int. Steps at the start of `fit` not counted.
            Defaults to `2`.
        log_dir: str or None. TensorBoard directory for `throughput/*`
            scalars (chief only). Defaults to `None` (no scalars).
        summary_freq: int. Write TensorBoard scalars every this many steps.
            Defaults to `10`.
        verbose: int. 0: silent; 1: the chief prints a line per epoch and a
            summary at the end. Defaults to `1`.
        json_path: str or None. The chief writes `summary()` there as JSON at
            train end. Defaults to `None`.

    Example:
        >>> monitor = ThroughputMonitor(global_batch_size=64)  # doctest: +SKIP
        >>> model.fit(ds, epochs=2, callbacks=[monitor])
        >>> monitor.summary()["examples_per_sec"]
    """

    def __init__(
        self,
        global_batch_size: int,
        window: int = 20,
        warmup_steps: int = 2,
        log_dir: str | None = None,
        summary_freq: int = 10,
        verbose: int = 1,
        json_path: str | None = None,
    ):
        super().__init__()
        validation.check_int("global_batch_size", global_batch_size, 1)
        validation.check_int("window", window, 1)
        validation.check_int("warmup_steps", warmup_steps, 0)
        validation.check_int("summary_freq", summary_freq, 1)
        validation.check_int("verbose", verbose, 0)
        self.global_batch_size = global_batch_size
        self.window = window
        self.warmup_steps = warmup_steps
        self.log_dir = log_dir
        self.summary_freq = summary_freq
        self.verbose = verbose
        self.json_path = json_path
        self._reset()

    def _reset(self):
        self._window = stats.Window(self.window)
        self._all_times: list[float] = []
        self._examples_timed = 0
        self._steps_seen = 0
        self._last = None
        self._epoch_times: list[float] = []
        self._epoch_examples = 0
        self._num_replicas = 1
        self._steps_per_execution = 1
        self._chief = True
        self._writer = None

    # ------------------------------------------------------------- hooks
    def on_train_begin(self, logs=None):
        _common.check_fit_order(self.model)
        self._reset()
        self._chief = _common.is_chief()
        self._num_replicas = self.model.distribute_strategy.num_replicas_in_sync
        self._steps_per_execution = int(getattr(self.model, "steps_per_execution", 1) or 1)
        self._writer = summaries.ScalarWriter(self.log_dir, self._chief)

    def on_epoch_begin(self, epoch, logs=None):
        self._last = None
        self._epoch_times = []
        self._epoch_examples = 0

    def on_train_batch_begin(self, batch, logs=None):
        if self._last is None:
            self._last = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        if getattr(self.model, SKIPPING_ATTR, False):
            self._last = None
            return
        step = _common.complete_step(self.model)
        now = time.perf_counter()
        elapsed, self._last = now - self._last, now
        self._steps_seen += 1
        if self._steps_seen <= self.warmup_steps:
            return
        examples = self.global_batch_size * self._steps_per_execution
        self._window.add(elapsed, examples)
        self._all_times.append(elapsed / self._steps_per_execution)
        self._examples_timed += examples
        self._epoch_times.append(elapsed / self._steps_per_execution)
        self._epoch_examples += examples
        values = self._figures(
            self._window.examples_per_sec(),
            [t / self._steps_per_execution for t in self._window.times],
        )
        if logs is not None:
            logs.update(values)
        if self._writer is not None and step % self.summary_freq == 0:
            self._writer.write("throughput", values, step)

    def on_epoch_end(self, epoch, logs=None):
        if not self._epoch_times:
            return
        total = sum(self._epoch_times) * self._steps_per_execution
        values = self._figures(self._epoch_examples / total, self._epoch_times)
        if logs is not None:
            logs.update(values)
        if self._chief and self.verbose:
            print(
                f"ThroughputMonitor epoch {epoch + 1}: "
                f"{values['examples_per_sec']:.1f} examples/sec "
                f"({values['examples_per_sec_per_replica']:.1f} per replica), "
                f"step time median {values['step_time_median'] * 1e3:.2f} ms, "
                f"p90 {values['step_time_p90'] * 1e3:.2f} ms",
                flush=True,
            )

    def on_train_end(self, logs=None):
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self._chief and self.verbose and self._all_times:
            print(
                "ThroughputMonitor summary: " + json.dumps(self.summary(), sort_keys=True),
                flush=True,
            )
        if self.json_path:
            self.export_json(self.json_path)

    # ------------------------------------------------------------ results
    def summary(self) -> dict:
        """Figures over every counted step of the last `fit`.

        Returns:
            dict with `examples_per_sec`, `examples_per_sec_per_replica`,
            `step_time_median`, `step_time_p90`, `step_time_jitter`
            (seconds / ratio), `steps_timed`, `examples_timed`,
            `seconds_timed`, `global_batch_size`, `num_replicas`,
            `warmup_steps`. Empty if no step was counted.
        """
        if not self._all_times:
            return {}
        seconds = sum(self._all_times) * self._steps_per_execution
        out = self._figures(self._examples_timed / seconds, self._all_times)
        out.update(
            {
                "step_time_jitter": stats.jitter(self._all_times),
                "steps_timed": len(self._all_times),
                "examples_timed": self._examples_timed,
                "seconds_timed": seconds,
                "global_batch_size": self.global_batch_size,
                "num_replicas": self._num_replicas,
                "warmup_steps": self.warmup_steps,
            }
        )
        return out

    def export_json(self, path: str) -> str | None:
        """Writes `summary()` to `path` atomically, on the chief only.

        Returns:
            `path` on the chief, `None` on other workers (which write nothing).
        """
        if not self._chief:
            return None
        _common.atomic_write_text(path, json.dumps(self.summary(), indent=2, sort_keys=True))
        return path

    # ------------------------------------------------------- internals
    def _figures(self, examples_per_sec: float, step_times) -> dict:
        return {
            "examples_per_sec": examples_per_sec,
            "examples_per_sec_per_replica": examples_per_sec / self._num_replicas,
            "step_time_median": stats.median(step_times),
            "step_time_p90": stats.percentile(step_times, 90),
        }
