"""Fixtures of the bug-report tests (tests/bug_reports/support.py has the rest)."""

import pytest

from tests.bug_reports import support


@pytest.fixture
def multi_worker():
    """The multi-worker strategy, built only in the child process (`support.own_process`).

    `KerasMultiWorkerMirroredStrategy` with 2 local CPU replicas: the class
    `opt_strategy()` builds on every worker, taking the same reduce and
    gather paths with one worker.
    """
    if not support.in_child():
        return None
    from tfdist_opt.keras import keras_compat  # pylint: disable=g-import-not-at-top

    strategy = keras_compat.KerasMultiWorkerMirroredStrategy(local_cpu_replicas=2)
    assert strategy.num_replicas_in_sync == 2
    return strategy
