"""`BatchSizeFinder`: the largest useful per-replica batch size, by trial."""

from __future__ import annotations

import dataclasses
import gc
from typing import Callable, Sequence

import tensorflow as tf

from tfdist_opt import validation
from tfdist_opt.callbacks import _common
from tfdist_opt.callbacks import lr_math
from tfdist_opt.callbacks import stats
from tfdist_opt.callbacks.throughput import ThroughputMonitor

OUT_OF_MEMORY = "out_of_memory"
PLATEAU = "plateau"
MAX_BATCH_SIZE = "max_batch_size"


@dataclasses.dataclass(frozen=True)
class BatchSizeResult:
    """What `BatchSizeFinder.find` chose and why.

    Attributes:
        per_replica_batch_size: int. The fastest size tried that fit.
        global_batch_size: int. `per_replica_batch_size * num_replicas`.
        learning_rate: float or None. `base_lr` rescaled by the linear
            scaling rule for `global_batch_size` (None without `base_lr`).
        examples_per_sec: dict int -> float. Throughput per per-replica size
            tried (sizes that ran out of memory are absent).
        stop_reason: str. `"out_of_memory"`, `"plateau"` or `"max_batch_size"`.
    """

    per_replica_batch_size: int
    global_batch_size: int
    learning_rate: float | None
    examples_per_sec: dict
    stop_reason: str


class BatchSizeFinder:
    """Tries growing per-replica batch sizes; stops at OOM or a throughput plateau.

    For each size `b = start, start*factor, ...` (up to `max_batch_size`) it
    builds a fresh model with `model_fn()` under the strategy's scope, a
    dataset with `dataset_fn(global_batch_size)`, and runs `fit` for
    `warmup_steps + steps_per_trial` steps, timing the last
    `steps_per_trial` with `ThroughputMonitor` (at real step completion).
    It stops when a trial raises `tf.errors.ResourceExhaustedError`
    (anywhere: building, tracing or running; also when TF reports it inside
    a combined multi-replica error, see `is_out_of_memory`), or when the new throughput is
    not `rel_tolerance` above the best so far (`stats.plateau_reached`),
    and returns the fastest size that fit.

    Multi-worker: every worker must call `find` with the same arguments.
    After each trial the workers agree through one small all-reduce: any
    worker's OOM stops all, and the plateau test uses the chief's
    throughput, so all return the same result. An OOM that strikes one
    worker in the middle of a collective aborts the collectives (TF cannot
    recover in-process); inject or expect OOM before the step runs, or run
    the finder on one worker. Only the chief prints.

    Args:
        start: int. First per-replica batch size. Defaults to `8`.
        factor: int. Growth factor between trials. Defaults to `2`.
        max_batch_size: int. Largest per-replica size tried. Defaults to `4096`.
        steps_per_trial: int. Timed steps per size. Defaults to `5`.
        warmup_steps: int. Untimed steps first (tracing). Defaults to `2`.
        rel_tolerance: float. Minimum relative gain to keep growing.
            Defaults to `0.05`.
        base_lr: float or None. Learning rate tuned for `base_batch_size`.
        base_batch_size: int or None. Required with `base_lr`.
        callbacks: sequence. Extra callbacks for every trial `fit`.
        verbose: int. 1: the chief prints one line per trial. Defaults to `1`.

    Example:
        >>> finder = BatchSizeFinder(base_lr=0.1, base_batch_size=256)  # doctest: +SKIP
        >>> result = finder.find(build_model, lambda gbs: make_ds(gbs))
        >>> result.per_replica_batch_size, result.learning_rate
    """

    def __init__(
        self,
        start: int = 8,
        factor: int = 2,
        max_batch_size: int = 4096,
        steps_per_trial: int = 5,
        warmup_steps: int = 2,
        rel_tolerance: float = 0.05,
        base_lr: float | None = None,
        base_batch_size: int | None = None,
        callbacks: Sequence = (),
        verbose: int = 1,
    ):
        for name, value, minimum in (
            ("start", start, 1),
            ("factor", factor, 2),
            ("max_batch_size", max_batch_size, 1),
            ("steps_per_trial", steps_per_trial, 1),
            ("warmup_steps", warmup_steps, 0),
            ("verbose", verbose, 0),
        ):
            validation.check_int(name, value, minimum)
        if max_batch_size < start:
            raise ValueError(
                "Invalid value for `max_batch_size`: expected >= "
                f"start={start}. Received: max_batch_size={max_batch_size}"
            )
        validation.check_number("rel_tolerance", rel_tolerance, allow_zero=True)
        if (base_lr is None) != (base_batch_size is None):
            raise ValueError(
                "Invalid arguments: give both `base_lr` and "
                f"`base_batch_size` or neither. Received: base_lr="
                f"{base_lr!r}, base_batch_size={base_batch_size!r}"
            )
        if base_lr is not None:
            lr_math.linear_scaled_lr(base_lr, 1, base_batch_size)  # validates
        self.start = start
        self.factor = factor
        self.max_batch_size = max_batch_size
        self.steps_per_trial = steps_per_trial
        self.warmup_steps = warmup_steps
        self.rel_tolerance = rel_tolerance
        self.base_lr = base_lr
        self.base_batch_size = base_batch_size
        self.callbacks = list(callbacks)
        self.verbose = verbose

    def candidates(self) -> list[int]:
        """The per-replica sizes in trial order."""
        sizes, b = [], self.start
        while b <= self.max_batch_size:
            sizes.append(b)
            b *= self.factor
        return sizes

    def find(
        self,
        model_fn: Callable,
        dataset_fn: Callable[[int], tf.data.Dataset],
        strategy: tf.distribute.Strategy | None = None,
    ) -> BatchSizeResult:
        """Runs the trials.

        Args:
            model_fn: callable. `() -> compiled keras.Model`, called under
                `strategy.scope()` once per trial.
            dataset_fn: callable. `global_batch_size -> tf.data.Dataset` of
                batches of that size, at least `warmup_steps +
                steps_per_trial` long (e.g. `.repeat()`).
            strategy: `tf.distribute.Strategy` or None. Defaults to the
                current one.

        Returns:
            `BatchSizeResult`.

        Raises:
            RuntimeError: the first size already ran out of memory.
        """
        strategy = strategy or tf.distribute.get_strategy()
        replicas = strategy.num_replicas_in_sync
        chief = _common.is_chief()
        tried: dict[int, float] = {}
        throughputs: list[float] = []
        reason = MAX_BATCH_SIZE
        for size in self.candidates():
            gbs = size * replicas
            oom, local = self._trial(model_fn, dataset_fn, strategy, gbs)
            any_oom, chief_tput = _agree(strategy, [float(oom), local if chief else 0.0])
            if any_oom > 0:
                reason = OUT_OF_MEMORY
                if chief and self.verbose:
                    print(f"BatchSizeFinder: per-replica batch {size}: out of memory", flush=True)
                break
            tried[size] = chief_tput
            throughputs.append(chief_tput)
            if chief and self.verbose:
                print(
                    f"BatchSizeFinder: per-replica batch {size}: {chief_tput:.1f} examples/sec",
                    flush=True,
                )
            if stats.plateau_reached(throughputs, self.rel_tolerance):
                reason = PLATEAU
                break
        if not tried:
            raise RuntimeError(
                "BatchSizeFinder: the first per-replica batch size already ran "
                f"out of memory. Received: start={self.start}. Expected a "
                "smaller `start`."
            )
        best = max(tried, key=lambda b: (tried[b], -b))
        gbs = best * replicas
        lr = (
            None
            if self.base_lr is None
            else lr_math.linear_scaled_lr(self.base_lr, gbs, self.base_batch_size)
        )
        return BatchSizeResult(best, gbs, lr, dict(tried), reason)

    def _trial(self, model_fn, dataset_fn, strategy, gbs) -> tuple[bool, float]:
        monitor = ThroughputMonitor(
            global_batch_size=gbs,
            window=self.steps_per_trial,
            warmup_steps=self.warmup_steps,
            verbose=0,
        )
        model = None
        try:
            with strategy.scope():
                model = model_fn()
            ds = dataset_fn(gbs)
            model.fit(
                ds,
                epochs=1,
                steps_per_epoch=self.warmup_steps + self.steps_per_trial,
                verbose=0,
                callbacks=[monitor, *self.callbacks],
            )
            return False, monitor.summary()["examples_per_sec"]
        except tf.errors.OpError as e:
            if is_out_of_memory(e):
                return True, 0.0
            raise
        finally:
            del model
            gc.collect()


_OOM_MARKERS = (
    "RESOURCE_EXHAUSTED",
    "ResourceExhaustedError",
    "OOM when allocating",
    "Out of memory",
)


def is_out_of_memory(error: Exception) -> bool:
    """True for `ResourceExhaustedError`, also when TF wraps it.

    Several replicas failing in one step reach Python as one error whose
    class is that of a single status (py_function failures become UNKNOWN),
    so the message is checked for the out-of-memory status too.
    """
    if isinstance(error, tf.errors.ResourceExhaustedError):
        return True
    text = str(error)
    return any(marker in text for marker in _OOM_MARKERS)


def _agree(strategy, values: list[float]) -> list[float]:
    """Sum of `values` over workers (one all-reduce; identity on one worker)."""
    local = max(1, len(getattr(strategy.extended, "worker_devices", ()) or ()))
    vec = tf.constant([v / local for v in values], tf.float32)

    @tf.function
    def reduce():
        def fn():
            return tf.distribute.get_replica_context().all_reduce("SUM", vec)

        return strategy.experimental_local_results(strategy.run(fn))[0]

    return [float(x) for x in reduce().numpy()]
