"""`CommunicationProfiler`: the share of step time spent in the gradient all-reduce."""

from __future__ import annotations

import json
import os
import time

import keras
import tensorflow as tf

from tfdist_opt import validation
from tfdist_opt.callbacks import _common
from tfdist_opt.callbacks import stats
from tfdist_opt.callbacks import summaries
from tfdist_opt.callbacks.throughput import SKIPPING_ATTR
from tfdist_opt.gradients.autotune import timing

_MAX_TRACE_STEPS = 1000


class CommunicationProfiler(keras.callbacks.Callback):
    """Measures `comm_fraction`: gradient all-reduce time / train-step time.

    What it measures, precisely:

    * `comm_time`: at `on_train_begin`, the median wall time of
      `probe_steps` calls of a `tf.function` that does, in every replica,
      exactly what Keras's optimizer does with the gradients of one step
      (`keras/src/backend/tensorflow/optimizer.py`,
      `_all_reduce_sum_gradients`): one `ReplicaContext.all_reduce(SUM, [...])`
      over tensors with the shapes and dtypes of `model.trainable_variables`,
      through the strategy's own cross-device ops / collectives (so packing
      and the RING/NCCL choice are the real ones). Each call is completed by
      copying one scalar to the host. `probe_warmup` untimed calls go first;
      the median is then averaged over workers
      (`tfdist_opt.gradients.autotune.timing.time_and_agree`), so every worker
      reports the same `comm_time`.
    * `step_time`: the median, over training steps after `warmup_steps`, of
      the time from `on_train_batch_begin` to the step's completion (forced
      by reading `optimizer.iterations`, see `ThroughputMonitor`).
    * `comm_fraction = min(1, comm_time / step_time)`.

    The probe is the all-reduce alone, with no compute to overlap with; TF
    issues the gradient all-reduce after the backward pass, so for Keras
    `fit` this is the time the step spends communicating (an upper bound if
    some overlap does happen). Under a one-device strategy it is ~0. Every
    worker runs the probe (it is a collective) the same number of times.

    Written into `logs` (`comm_fraction`, `comm_time`, `step_time`, seconds)
    after each counted batch and at each epoch end. The chief prints a line
    per epoch (`verbose=1`) and, with `trace_path`, writes a Chrome trace
    (`chrome://tracing`, Perfetto) of the probe calls and, per step, the
    phases `train_step` (with an estimated `gradient_all_reduce` slice at its
    end, of length `comm_time`) and `host_gap` (input + callbacks between
    steps), for the first 1000 steps. With `log_dir`, the chief writes
    TensorBoard scalars `comm/comm_fraction`, `comm/comm_time` and
    `comm/step_time` at each epoch end (step: `optimizer.iterations`).

    Ordering: before callbacks that read `logs`.

    Args:
        probe_steps: int. Timed probe calls. Defaults to `10`.
        probe_warmup: int. Untimed probe calls first. Defaults to `2`.
        warmup_steps: int. Training steps not counted in `step_time`.
            Defaults to `2`.
        trace_path: str or None. Chrome-trace JSON written by the chief at
            train end. Defaults to `None`.
        verbose: int. 0 silent, 1 the chief prints. Defaults to `1`.
        log_dir: str or None. TensorBoard directory for the `comm/*`
            scalars (chief only). Defaults to `None` (no scalars).

    Example:
        >>> prof = CommunicationProfiler(trace_path="/tmp/steps.json")  # doctest: +SKIP
        >>> model.fit(ds, callbacks=[prof]); prof.comm_fraction
    """

    def __init__(
        self,
        probe_steps: int = 10,
        probe_warmup: int = 2,
        warmup_steps: int = 2,
        trace_path: str | None = None,
        verbose: int = 1,
        log_dir: str | None = None,
    ):
        super().__init__()
        for name, value, minimum in (
            ("probe_steps", probe_steps, 1),
            ("probe_warmup", probe_warmup, 0),
            ("warmup_steps", warmup_steps, 0),
            ("verbose", verbose, 0),
        ):
            validation.check_int(name, value, minimum, expected=f"an int >= {minimum}")
        self.probe_steps = probe_steps
        self.probe_warmup = probe_warmup
        self.warmup_steps = warmup_steps
        self.trace_path = trace_path
        self.verbose = verbose
        self.log_dir = log_dir
        self._writer = None
        self._reset()

    def _reset(self):
        self._chief = True
        self._comm_time = None
        self._probe_times: list[float] = []
        self._step_times: list[float] = []
        self._steps_seen = 0
        self._begin = None
        self._events: list[dict] = []
        self._t0 = time.perf_counter()
        self._last_end = None
        self._bytes = 0
        self._tag = "local"

    @property
    def comm_time(self) -> float | None:
        """Median seconds of one gradient all-reduce (after `on_train_begin`)."""
        return self._comm_time

    @property
    def step_time(self) -> float | None:
        return stats.median(self._step_times) if self._step_times else None

    @property
    def comm_fraction(self) -> float | None:
        if self._comm_time is None or not self._step_times:
            return None
        step = self.step_time
        return 1.0 if step <= 0 else min(1.0, self._comm_time / step)

    # ------------------------------------------------------------- hooks
    def on_train_begin(self, logs=None):
        _common.check_fit_order(self.model)
        self._reset()
        self._chief = _common.is_chief()
        self._tag = _common.task_tag()
        self._writer = summaries.ScalarWriter(self.log_dir, self._chief)
        self._comm_time = self._probe()
        if self._chief and self.verbose:
            print(
                f"CommunicationProfiler: all-reduce of "
                f"{len(self.model.trainable_variables)} gradient tensors "
                f"({self._bytes / 2**20:.2f} MiB) takes "
                f"{self._comm_time * 1e3:.3f} ms (median of "
                f"{self.probe_steps})",
                flush=True,
            )

    def on_train_batch_begin(self, batch, logs=None):
        self._begin = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        if getattr(self.model, SKIPPING_ATTR, False):
            return
        _common.complete_step(self.model)
        end = time.perf_counter()
        spe = int(getattr(self.model, "steps_per_execution", 1) or 1)
        self._trace_step(self._begin, end)
        self._steps_seen += 1
        if self._steps_seen <= self.warmup_steps:
            return
        self._step_times.append((end - self._begin) / spe)
        if logs is not None:
            logs.update(self._values())

    def on_epoch_end(self, epoch, logs=None):
        if self.comm_fraction is None:
            return
        if logs is not None:
            logs.update(self._values())
        if self._writer is not None and self._writer.active:
            self._writer.write("comm", self._values(), _common.complete_step(self.model))
        if self._chief and self.verbose:
            print(
                f"CommunicationProfiler epoch {epoch + 1}: comm_fraction "
                f"{self.comm_fraction:.3f} (all-reduce "
                f"{self._comm_time * 1e3:.3f} ms of "
                f"{self.step_time * 1e3:.3f} ms per step)",
                flush=True,
            )

    def on_train_end(self, logs=None):
        if self._writer is not None:
            self._writer.close()
            self._writer = None
        if self.trace_path and self._chief:
            self.export_trace(self.trace_path)

    # ------------------------------------------------------- internals
    def _values(self) -> dict:
        return {
            "comm_fraction": self.comm_fraction,
            "comm_time": self._comm_time,
            "step_time": self.step_time,
        }

    def _probe(self) -> float:
        strategy = self.model.distribute_strategy
        specs = [(tuple(v.shape), v.dtype) for v in self.model.trainable_variables]
        self._bytes = sum(
            int(tf.TensorShape(s).num_elements()) * tf.as_dtype(d).size for s, d in specs
        )
        if not specs:
            return 0.0

        def replica_fn(seed):
            # Inputs depend on a runtime argument so nothing is constant-folded,
            # and one element of every reduced tensor is consumed so nothing is
            # pruned: each call moves the full gradient volume.
            ctx = tf.distribute.get_replica_context()
            value = seed + tf.cast(ctx.replica_id_in_sync_group, tf.float32)
            grads = [tf.fill(s, tf.cast(value, d)) for s, d in specs]
            reduced = ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads)
            return tf.add_n([tf.cast(tf.reshape(r, [-1])[0], tf.float32) for r in reduced])

        result = timing.time_and_agree(
            strategy,
            replica_fn,
            self.probe_steps,
            self.probe_warmup,
            args_fn=lambda i: (tf.constant(float(i)),),
        )
        for start, end in result.samples:
            self._event("allreduce_probe", start, end, tid=1)
        self._probe_times = result.local_times
        return result.median_s

    def _event(self, name, start, end, tid=0):
        if len(self._events) < 4 * _MAX_TRACE_STEPS:
            self._events.append(
                {
                    "name": name,
                    "ph": "X",
                    "pid": self._tag,
                    "tid": tid,
                    "ts": (start - self._t0) * 1e6,
                    "dur": (end - start) * 1e6,
                }
            )

    def _trace_step(self, begin, end):
        if self._last_end is not None:
            self._event("host_gap", self._last_end, begin)
        self._event("train_step", begin, end)
        if self._comm_time:
            self._event(
                "gradient_all_reduce (estimated)", max(begin, end - self._comm_time), end, tid=2
            )
        self._last_end = end

    def export_trace(self, path: str) -> str | None:
        """Writes the Chrome trace on the chief; returns `path` (None elsewhere)."""
        if not self._chief:
            return None
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        _common.atomic_write_text(
            path, json.dumps({"traceEvents": self._events, "displayTimeUnit": "ms"})
        )
        return path
