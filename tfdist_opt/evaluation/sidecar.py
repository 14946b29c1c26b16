"""`SidecarEvaluator`: evaluate every checkpoint the training chief writes.

The Keras 3 counterpart of tf_keras's `tf.keras.utils.SidecarEvaluator`
(Keras 3 has none), run on the `evaluator` task of TF_CONFIG. TensorFlow's
rule is that the evaluator is not part of the training cluster: training
tasks ignore it when they form the cluster, and `opt_strategy()` on the
evaluator returns a one-device strategy. Which checkpoints are complete is
decided in `tfdist_opt.evaluation.checkpoints`; when training has ended in
`tfdist_opt.evaluation.loop` (the chief's TF server, once seen, is gone).
"""

from __future__ import annotations

import os
import sys
import time
import zipfile
from typing import Any, Callable

import keras
import tensorflow as tf

from tfdist_opt.callbacks import summaries
from tfdist_opt.cluster import tf_config as tf_config_lib
from tfdist_opt.evaluation import checkpoints as checkpoints_lib
from tfdist_opt.evaluation import loop as loop_lib

# What a half-written, foreign or vanished checkpoint raises on load: h5py
# refuses a truncated .h5 (its superblock records the end of file), a .keras
# zip without its central directory (written last) is a BadZipFile.
_LOAD_ERRORS = (
    OSError,
    ValueError,
    KeyError,
    AssertionError,
    zipfile.BadZipFile,
    tf.errors.OpError,
)


class SidecarEvaluator:
    """Evaluates each new checkpoint in `checkpoint_dir` until training ends.

    Run it on the `evaluator` task; one script serves every task. Each new
    complete checkpoint is loaded into `model` and evaluated with
    `model.evaluate(data, steps=steps, callbacks=callbacks)`; the metrics
    are logged (one line each) and, with `log_dir`, written as TensorBoard
    scalars `evaluation/<metric>` at the checkpoint's step. A checkpoint is
    never read half-written (see `tfdist_opt.evaluation.checkpoints` for
    each format's rule), and `start()` returns once training has ended and
    every checkpoint written before the end has been evaluated.

    Readable formats, all in the top level of `checkpoint_dir`:
    `tfdist_opt.DistributedBackupAndRestore` backups (`backup-<step>/`),
    Keras files (`ModelCheckpoint`, `save_weights`, Keras's
    `BackupAndRestore` `latest.weights.h5`: `.weights.h5`, `.keras`, `.h5`)
    and `tf.train.Checkpoint` files (saved as
    `tf.train.Checkpoint(model=model, ...)`, as tf_keras expects).

    Training has ended when the training chief (TF_CONFIG's `chief`, or
    `worker` 0), once seen listening, has not answered for `end_grace_s`:
    its process has exited, with the all-reduce and the parameter-server
    kinds alike. Without a TF_CONFIG naming a chief, `max_evaluations` or
    `timeout` stops the loop (or it runs until killed, as tf_keras's does).
    The evaluator needs to see the chief's files: a shared directory.

    Args:
        model: compiled `keras.Model`, built like the trained one (same
            layers, same weight order) and compiled with the metrics to
            report.
        data: what `model.evaluate` takes as `x` (a `tf.data.Dataset`, a
            `tfdist_opt.build_dataset` pipeline, ...), or a tuple of arrays
            `(x, y)` / `(x, y, sample_weight)`.
        checkpoint_dir: str. The directory the chief saves checkpoints in.
        steps: int or None. Batches per evaluation (None: until `data` is
            exhausted; needed for a repeated dataset). Defaults to `None`.
        max_evaluations: int or None. Stop after a checkpoint whose step
            (the number in its name, e.g. `ckpt-5`) is at least this
            (tf_keras's rule). Defaults to `None`.
        callbacks: list of `keras.callbacks.Callback` or None. Passed to
            every `model.evaluate`. Defaults to `None`.
        log_dir: str or None. Where to write TensorBoard scalars. Defaults
            to `None` (no scalars).
        timeout: float or None. Stop when no checkpoint was evaluated for
            this many seconds. Defaults to `None`.
        poll_interval: float. Seconds between looks at `checkpoint_dir`.
            Defaults to `1`.
        settle_s: float. How long a Keras file must keep its size and mtime
            before it is read. Defaults to `2`.
        end_grace_s: float. How long the chief must be unreachable before
            training counts as ended. Defaults to `3`.
        startup_timeout: float or None. How long to wait for the chief to
            appear at all, after which the checkpoints present are evaluated
            and `start()` returns. Defaults to `300`.
        verbose: int. `model.evaluate`'s verbosity. Defaults to `2`.

    Raises:
        TypeError: `model` is not a Keras model.
        ValueError: `model` is not compiled, or a bad number argument.

    Example:
        ```python
        strategy = tfdist_opt.opt_strategy()       # on every task
        with strategy.scope():
            model = make_model()                   # compiled, with metrics
        if tfdist_opt.task_type() == "evaluator":
            tfdist_opt.SidecarEvaluator(model, val_ds, "ckpt",
                                        log_dir="logs/eval").start()
        else:
            model.fit(train_ds, epochs=5, callbacks=[
                keras.callbacks.ModelCheckpoint(
                    "ckpt/weights.{epoch:02d}.weights.h5",
                    save_weights_only=True)])
        ```
    """

    def __init__(
        self,
        model,
        data,
        checkpoint_dir,
        steps=None,
        max_evaluations=None,
        callbacks=None,
        *,
        log_dir=None,
        timeout=None,
        poll_interval=1.0,
        settle_s=2.0,
        end_grace_s=3.0,
        startup_timeout=300.0,
        verbose=2,
    ):
        if not isinstance(model, keras.Model):
            raise TypeError(
                "Invalid value for `model`: expected a Keras 3 "
                f"`keras.Model`. Received: model={type(model).__name__}"
            )
        if not getattr(model, "compiled", False):
            raise ValueError(
                "Invalid value for `model`: expected a compiled model (with "
                "the metrics to report); call model.compile(...) first. "
                f"Received: model={model.name!r} (not compiled)"
            )
        if not isinstance(checkpoint_dir, str) or not checkpoint_dir:
            raise ValueError(
                "Invalid value for `checkpoint_dir`: expected a "
                "non-empty path. Received: "
                f"checkpoint_dir={checkpoint_dir!r}"
            )
        for name, value, integer in (
            ("steps", steps, True),
            ("max_evaluations", max_evaluations, True),
            ("timeout", timeout, False),
            ("startup_timeout", startup_timeout, False),
        ):
            _check_number(name, value, integer, allow_none=True)
        for name, value in (
            ("poll_interval", poll_interval),
            ("settle_s", settle_s),
            ("end_grace_s", end_grace_s),
        ):
            _check_number(name, value, False, allow_none=False)
        self.model = model
        self.data = data
        self.checkpoint_dir = checkpoint_dir
        self.steps = steps
        self.max_evaluations = max_evaluations
        self.callbacks = list(callbacks or [])
        self.log_dir = log_dir
        self.timeout = timeout
        self.poll_interval = poll_interval
        self.settle_s = settle_s
        self.end_grace_s = end_grace_s
        self.startup_timeout = startup_timeout
        self.verbose = verbose
        self.outcome: loop_lib.Outcome | None = None
        self._evaluated = 0

    # ------------------------------------------------------------ the loop
    def start(
        self,
        *,
        tf_config: dict[str, Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> dict | None:
        """Runs the evaluation loop until training has ended.

        Args:
            tf_config: dict or None. The TF_CONFIG naming the training
                chief. Defaults to this process's.
            clock, sleep: injected time (tests).

        Returns:
            dict: the metrics of the last checkpoint evaluated, or None if
            there was none. `self.outcome` holds every evaluation.
        """
        if tf_config is None:
            tf_config = tf_config_lib.tf_config_from_env()
        address = loop_lib.chief_address(tf_config)
        ended_file = os.environ.get(loop_lib.TRAINING_ENDED_ENV)
        end = (
            loop_lib.ChiefWatch(
                address,
                self.end_grace_s,
                self.startup_timeout,
                clock=clock,
                ended=(lambda: os.path.exists(ended_file)) if ended_file else (lambda: False),
            )
            if address
            else None
        )
        watcher = checkpoints_lib.CheckpointWatcher(
            self.checkpoint_dir, settle_s=self.settle_s, clock=clock
        )
        writer = summaries.ScalarWriter(self.log_dir, chief=True)
        _log(
            f"watching {self.checkpoint_dir} for checkpoints"
            + (
                f"; training ends when the chief ({address}) exits"
                if address
                else "; no TF_CONFIG chief: stops on max_evaluations/timeout"
            )
        )
        try:
            self.outcome = loop_lib.run(
                watcher,
                end,
                self.load,
                lambda item: self._evaluate(item, writer),
                max_evaluations=self.max_evaluations,
                timeout_s=self.timeout,
                poll_s=self.poll_interval,
                clock=clock,
                sleep=sleep,
                log=_log,
                load_errors=_LOAD_ERRORS,
            )
        finally:
            writer.close()
        n = len(self.outcome.evaluations)
        _log(
            f"stopping ({self.outcome.reason}): {n} checkpoint(s) evaluated"
            + (f", {len(self.outcome.skipped)} unreadable" if self.outcome.skipped else "")
        )
        return self.outcome.evaluations[-1].metrics if n else None

    def load(self, item: checkpoints_lib.Found) -> None:
        """Restores `item` into `self.model` (raises on an unreadable file)."""
        if item.format == "keras":
            self.model.load_weights(item.path)
            return
        if not self.model.weights:
            raise ValueError(
                "Invalid value for `model`: it has no weights yet, so a "
                f"checkpoint cannot be restored into it. Received: {item.name}. "
                "Expected a built model (call it on a batch or give Input shapes)."
            )
        if item.format == "backup":  # DistributedBackupAndRestore's layout
            ckpt = tf.train.Checkpoint(weights=list(self.model.weights))
        else:
            ckpt = tf.train.Checkpoint(model=self.model)
        status = ckpt.read(item.path)
        status.expect_partial()
        try:
            status.assert_existing_objects_matched()
        except AssertionError as e:
            root = "weights" if item.format == "backup" else "model"
            raise ValueError(
                f"Checkpoint {item.path} does not hold this model's weights "
                f"under `{root}` (expected tf.train.Checkpoint({root}=...) of "
                f"the same model): {str(e)[:300]}"
            ) from e

    def _evaluate(self, item, writer) -> dict:
        x, y, weights = (
            keras.utils.unpack_x_y_sample_weight(self.data)
            if isinstance(self.data, tuple)
            else (self.data, None, None)
        )
        metrics = self.model.evaluate(
            x,
            y,
            sample_weight=weights,
            steps=self.steps,
            callbacks=self.callbacks,
            verbose=self.verbose,
            return_dict=True,
        )
        metrics = {k: float(v) for k, v in metrics.items()}
        self._evaluated += 1
        step = item.step if item.step is not None else self._evaluated
        _log(
            f"{item.name} (step {item.step}): "
            + ", ".join(f"{k}={v:.6g}" for k, v in sorted(metrics.items()))
        )
        writer.write("evaluation", metrics, step)
        return metrics


def _check_number(name, value, integer, allow_none):
    if value is None and allow_none:
        return
    ok = (
        not isinstance(value, bool)
        and isinstance(value, int if integer else (int, float))
        and (value > 0 if integer else value >= 0)
    )
    if not ok:
        expected = "a positive int" if integer else "a number >= 0 (seconds)"
        raise ValueError(
            f"Invalid value for `{name}`: expected {expected}"
            f"{' or None' if allow_none else ''}. Received: "
            f"{name}={value!r}"
        )


def _log(message: str) -> None:
    print(f"tfdist_opt: evaluator: {message}", file=sys.stderr, flush=True)
