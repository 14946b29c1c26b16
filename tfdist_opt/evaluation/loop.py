"""The side-car evaluation loop and how it learns training ended. Pure Python.

Training has ended when the training chief's TF server, once seen, stops
answering for `grace_s` seconds: the chief is the `chief` task (the
parameter-server coordinator) or worker 0 of an all-reduce cluster, and a
TF server lives exactly as long as its process (it cannot be stopped inside
it). This needs nothing from the training script, works the same for the
all-reduce and parameter-server kinds, and is how tfdist_opt's parameter
servers learn the job is over (`tfdist_opt.parameter_server.serving`). The
process has exited, so every checkpoint it wrote is complete: the loop scans
once more (`final=True`), evaluates what is new and stops.

Clock, sleep, the chief probe and the file listing are injected, so tests
run in milliseconds without sleeping.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable

from tfdist_opt.coordination import startup_guard
from tfdist_opt.coordination.task_env import TRAINING_ENDED_ENV  # noqa: F401
from tfdist_opt.evaluation import checkpoints as checkpoints_lib

RUNNING, WAITING, ENDED, NEVER_CAME = "running", "waiting", "ended", "never came"

# Set by `tfdist-opt launch --evaluator` in the evaluator's environment: a
# path the launcher creates once every training task has exited 0. An
# evaluator that starts after a short training (its chief came and went
# before the first probe) would otherwise wait `startup_timeout_s`.
# (`TRAINING_ENDED_ENV`, imported above from `tfdist_opt.coordination.task_env`.)


class ChiefWatch:
    """Whether the training chief has come and gone.

    Args:
        address: str. The chief's "host:port" from TF_CONFIG.
        grace_s: float. How long the chief must be unreachable, after it was
            seen, before training counts as ended (covers a slow accept).
            Defaults to `3`.
        startup_timeout_s: float or None. How long to wait for the chief to
            appear at all; None waits forever. Defaults to `300`.
        clock: callable. Monotonic seconds. Defaults to `time.monotonic`.
        answers: callable(address) -> bool. Defaults to a TCP connect.
        ended: callable() -> bool. True once whoever started the job knows
            every training task exited (the launcher's `TRAINING_ENDED_ENV`
            file): training has ended whether or not the chief was seen.
            Defaults to never.
    """

    def __init__(
        self,
        address: str,
        grace_s: float = 3.0,
        startup_timeout_s: float | None = 300.0,
        clock: Callable[[], float] = time.monotonic,
        answers: Callable[[str], bool] = startup_guard.is_listening,
        ended: Callable[[], bool] = lambda: False,
    ):
        self.address = address
        self.grace_s = grace_s
        self.startup_timeout_s = startup_timeout_s
        self._clock, self._answers, self._ended = clock, answers, ended
        self._start = clock()
        self._seen = False
        self._gone_since: float | None = None

    def poll(self) -> str:
        """`running`, `waiting` (not seen yet), `ended` or `never came`."""
        up = self._answers(self.address)
        now = self._clock()
        if up:
            self._seen, self._gone_since = True, None
            return RUNNING
        if self._ended():
            return ENDED
        if self._seen:
            if self._gone_since is None:
                self._gone_since = now
            return ENDED if now - self._gone_since >= self.grace_s else RUNNING
        if self.startup_timeout_s is not None and now - self._start > self.startup_timeout_s:
            return NEVER_CAME
        return WAITING


def chief_address(tf_config: dict[str, Any] | None) -> str | None:
    """The training chief's address: `chief` 0, else `worker` 0; None without
    a training cluster."""
    if not tf_config:
        return None
    cluster = tf_config["cluster"]
    for role in ("chief", "worker"):
        if cluster.get(role):
            return cluster[role][0]
    return None


@dataclasses.dataclass
class Evaluation:
    """One evaluated checkpoint.

    Attributes:
        checkpoint: `checkpoints.Found`. What was read.
        metrics: dict of str to float. `model.evaluate`'s results.
    """

    checkpoint: checkpoints_lib.Found
    metrics: dict


@dataclasses.dataclass
class Outcome:
    """How the loop ended.

    Attributes:
        reason: str. "training ended", "max_evaluations", "timeout" or
            "chief never came".
        evaluations: list of `Evaluation`, in order.
        skipped: list of str. Checkpoints that could not be read, and why.
    """

    reason: str
    evaluations: list
    skipped: list


def run(
    watcher: checkpoints_lib.CheckpointWatcher,
    end: ChiefWatch | None,
    load: Callable[[checkpoints_lib.Found], None],
    evaluate: Callable[[checkpoints_lib.Found], dict],
    *,
    max_evaluations: int | None = None,
    timeout_s: float | None = None,
    poll_s: float = 1.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    log: Callable[[str], None] = print,
    load_errors: tuple = (Exception,),
) -> Outcome:
    """Evaluates each new complete checkpoint until training has ended.

    Each pass first asks `end` whether training has ended, then lists the
    checkpoints (`final=True` once it has), so nothing the chief wrote
    before exiting is missed. A checkpoint is loaded, checked unchanged
    (a `keras` file rewritten during the load is dropped: its new version is
    read on a later pass), then evaluated. A load that raises one of
    `load_errors` is logged and skipped.

    Args:
        watcher: `CheckpointWatcher`.
        end: `ChiefWatch` or None (None: only `max_evaluations` or
            `timeout_s` stop the loop).
        load: callable(Found). Restores the checkpoint into the model.
        evaluate: callable(Found) -> dict. Evaluates and reports.
        max_evaluations: int or None. Stop after evaluating a checkpoint
            whose step is at least this (tf_keras's rule: `ckpt-<k>` is the
            k-th save); a checkpoint without a step counts evaluations.
        timeout_s: float or None. Stop when no checkpoint was evaluated for
            this long.
        poll_s: float. Seconds between passes. Defaults to `1`.
        clock, sleep, log: injected time and output.
        load_errors: tuple of exception types a failed load may raise.

    Returns:
        `Outcome`.
    """
    evaluations, skipped = [], []
    last_new = clock()
    while True:
        state = end.poll() if end is not None else RUNNING
        final = state in (ENDED, NEVER_CAME)
        for item in watcher.poll(final=final):
            watcher.mark_done(item)
            try:
                load(item)
            except load_errors as e:  # half-written or foreign: say so, go on
                why = f"{item.name}: {type(e).__name__}: {str(e)[:200]}"
                skipped.append(why)
                log(f"skipped unreadable checkpoint {why}")
                continue
            if not watcher.unchanged(item):
                log(f"{item.name} was rewritten while it was read; reading the new version next")
                continue
            evaluations.append(Evaluation(item, evaluate(item)))
            last_new = clock()
            done = item.step if item.step is not None else len(evaluations)
            if max_evaluations and done >= max_evaluations:
                return Outcome("max_evaluations", evaluations, skipped)
        if state == ENDED:
            return Outcome("training ended", evaluations, skipped)
        if state == NEVER_CAME:
            log(
                f"the training chief ({end.address}) never answered within "
                f"{end.startup_timeout_s:g} s; evaluated the checkpoints present"
            )
            return Outcome("chief never came", evaluations, skipped)
        if timeout_s is not None and clock() - last_new >= timeout_s:
            return Outcome("timeout", evaluations, skipped)
        sleep(poll_s)
