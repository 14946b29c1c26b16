"""Training one setting in chunks (one per round) and timing its batches."""

from __future__ import annotations

import time

from benchmarks import common
from benchmarks.train_lib import inputs as inputs_lib
from benchmarks.train_lib import models
from benchmarks.train_lib import settings as settings_lib


class Printer:
    """print() on the chief only."""

    def __init__(self, chief: bool):
        self.chief = chief

    def __call__(self, line: str = "") -> None:
        if self.chief:
            print(line, flush=True)


def step_timer(warmup: int, window: int, first_step: int, keras=None):
    """Keras callback: batch-end to batch-end durations, summed per window.

    The first `warmup` batches of the `fit` call are dropped; the rest are
    summed in windows of `window` batches (`window_durations`), and per
    Keras epoch (`epoch_sums`: (timed batches, seconds) per epoch). `keras`:
    the Keras whose `fit` is timed (default Keras 3; `tf.keras` for tf_keras).
    """
    if keras is None:
        import keras  # pylint: disable=g-import-not-at-top,redefined-outer-name

    class StepTimer(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.window_durations: list[float] = []
            self.losses: list[tuple[int, float]] = []
            self._last = None
            self._window_sum = 0.0
            self._step = 0
            self.epoch_sums: list[list] = []

        def on_epoch_begin(self, epoch, logs=None):
            self.epoch_sums.append([0, 0.0])

        def on_train_batch_begin(self, batch, logs=None):
            if self._last is None:
                self._last = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            now = time.perf_counter()
            duration, self._last = now - self._last, now
            self._step += 1
            if self._step <= warmup:
                return
            if self.epoch_sums:
                self.epoch_sums[-1][0] += 1
                self.epoch_sums[-1][1] += duration
            self._window_sum += duration
            if (self._step - warmup) % window == 0:
                self.window_durations.append(self._window_sum)
                self._window_sum = 0.0
                loss = float((logs or {}).get("loss", float("nan")))
                self.losses.append((first_step + self._step - warmup, loss))

    return StepTimer()


class SettingRun:
    """One setting's model and data, trained in chunks (one per round).

    The model is built and traced once (first chunk, whose first
    `warmup` batches are not timed); later chunks re-use it, dropping one
    window while the fresh iterator fills its buffers. Gradient options and
    numerics are bound when the train step is traced, in the first chunk.
    """

    def __init__(
        self,
        setting: settings_lib.Setting,
        strategy,
        inputs: inputs_lib.Inputs,
        args: settings_lib.RunArgs,
        printer: Printer,
    ):
        self.setting = setting
        self.strategy = strategy
        self.inputs = inputs
        self.args = args
        self.printer = printer
        self.model = None
        self.dataset = None
        self.window_durations: list[float] = []
        self.round_medians: list[float] = []
        self.epoch_eps: list[float] = []  # with args.epochs > 1
        self.wall_s = 0.0
        self.items_per_window = inputs.global_batch * args.window

    def _build(self):
        import keras  # pylint: disable=g-import-not-at-top

        args = self.args
        keras.utils.set_random_seed(args.seed)
        self.dataset = (
            self.inputs.naive() if self.setting.pipeline == "naive" else self.inputs.optimized()
        )
        with self.strategy.scope():
            self.model = models.build_model(args.model, self.inputs.image_size, args.num_classes)
            self.model.compile(
                optimizer=keras.optimizers.SGD(args.learning_rate, momentum=0.9),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=list(args.metrics) or None,
                jit_compile=False,
            )

    def run_chunk(self, batches: int) -> None:
        """Trains `batches` timed batches (plus the warm-up of this chunk)."""
        import keras  # pylint: disable=g-import-not-at-top
        import tensorflow as tf  # pylint: disable=g-import-not-at-top

        from tfdist_opt.strategy.devices import host_memory  # pylint: disable=g-import-not-at-top
        from tfdist_opt.gradients.binding import keras_binding  # pylint: disable=g-import-not-at-top

        setting, args, printer = self.setting, self.args, self.printer
        first = self.model is None
        warmup = args.warmup if first else args.window
        if args.in_process_compare:
            keras_binding.attach(self.strategy, settings_lib.gradient_options(setting))
            # Process-wide and switchable at any time: each setting runs
            # with its own allocator policy (the baseline with glibc's).
            if setting.tune_malloc:
                host_memory.tune_for_collectives()
            else:
                host_memory.restore_defaults()
        from tfdist_opt.stall import keras_binding as stall_binding  # pylint: disable=g-import-not-at-top

        stall_binding.set_enabled(self.strategy, setting.stall_inspector)
        keras.mixed_precision.set_global_policy(
            "float32" if setting.mixed_precision == "off" else setting.mixed_precision
        )
        tf.config.optimizer.set_jit(setting.jit_compile)
        try:
            if first:
                self._build()
            printer(
                f"Running warm up ({setting.name}: {setting.describe()})"
                if first
                else f"Running {setting.name} (next round)"
            )
            epochs = args.epochs
            if epochs > 1:  # warm up apart: every timed epoch is whole
                self.model.fit(
                    self.dataset, epochs=1, steps_per_epoch=warmup, verbose=0, shuffle=False
                )
            timer = step_timer(
                0 if epochs > 1 else warmup, args.window, len(self.window_durations) * args.window
            )
            started = time.perf_counter()
            self.model.fit(
                self.dataset,
                epochs=epochs,
                steps_per_epoch=(batches // epochs if epochs > 1 else warmup + batches),
                verbose=0,
                shuffle=False,
                callbacks=[timer],
            )
            self.wall_s += time.perf_counter() - started
            if epochs > 1:
                self.epoch_eps += [
                    n * self.inputs.global_batch / s for n, s in timer.epoch_sums if s > 0
                ]
        finally:
            keras.mixed_precision.set_global_policy("float32")
            tf.config.optimizer.set_jit(False)
            if args.in_process_compare:
                keras_binding.detach(self.strategy)
        if first:
            printer("Done warm up")
        printer("Step\tImg/sec\ttotal_loss")
        start = len(self.window_durations)
        self.window_durations += timer.window_durations
        every = max(1, args.display_every // args.window)
        for k, (step, loss) in enumerate(timer.losses):
            if (start + k + 1) % every == 0 or k + 1 == len(timer.losses):
                s = common.summarize(self.window_durations[: start + k + 1], self.items_per_window)
                printer(f"{step}\t{s.format('images/sec')}\t{loss:.3f}")
        self.round_medians.append(
            common.summarize(timer.window_durations, self.items_per_window).median
        )

    def epoch_spread(self) -> float | None:
        """Slowest over fastest epoch (examples/sec), None without epochs."""
        if not self.epoch_eps:
            return None
        return min(self.epoch_eps) / max(self.epoch_eps)

    def stats(self):
        return common.summarize(self.window_durations, self.items_per_window)
