"""A lost parameter server: one line naming the task, instead of a gRPC dump.

Worker failures are TF's to handle (the coordinator reschedules the failed
worker's steps and re-creates its dataset when it returns). A parameter
server holds the variables, so losing one ends the step loop: TF's
coordinator re-raises an `UnavailableError`/`AbortedError` carrying the
remote target (`/job:ps/replica:0/task:1`) among pages of gRPC detail.
"""

from __future__ import annotations

import contextlib
import re

import tensorflow as tf

_PS_TASK = re.compile(r"/job:ps/replica:\d+/task:(\d+)")


class ParameterServerLostError(RuntimeError):
    """A parameter-server task stopped answering; training cannot go on."""


def ps_task_in(error: BaseException) -> int | None:
    """The ps task index an error names, or None."""
    match = _PS_TASK.search(str(error))
    return int(match.group(1)) if match else None


def lost_ps_message(strategy, index: int) -> str:
    known = getattr(strategy, "ps_addresses", ())
    address = known[index] if index < len(known) else "address unknown"
    return (
        f"parameter server ps:{index} ({address}) was lost. "
        "Restart the job: with tfdist_opt.parameter_server.BackupAndRestore it "
        "resumes from the last checkpoint."
    )


@contextlib.contextmanager
def named_ps_failure(strategy):
    """Turns a TF error naming a ps task into `ParameterServerLostError`."""
    try:
        yield
    except (
        tf.errors.UnavailableError,
        tf.errors.AbortedError,
        tf.errors.CancelledError,
        tf.errors.InternalError,
        tf.errors.NotFoundError,
    ) as e:
        index = ps_task_in(e)
        if index is None:
            raise
        raise ParameterServerLostError(lost_ps_message(strategy, index)) from None


def install_excepthook() -> None:
    """A `ParameterServerLostError` that ends the program prints one line, no traceback."""
    import sys  # pylint: disable=g-import-not-at-top

    previous = sys.excepthook
    if getattr(previous, "_tfdist_opt_ps", False):
        return

    def hook(exc_type, exc, tb):
        if issubclass(exc_type, ParameterServerLostError):
            print(f"tfdist_opt: training stopped: {exc}", file=sys.stderr, flush=True)
            return
        previous(exc_type, exc, tb)

    hook._tfdist_opt_ps = True
    sys.excepthook = hook
