"""pytest plugin `benchmarks/keras_tests.py` loads into Keras's own test files.

`TFDIST_KERAS_TESTS_MODE` picks the run:

- `plain` (or unset): Keras's tests as Keras runs them; the plugin only
  registers Keras's pytest marks (its `conftest.py` is not in the source
  distribution).
- `ours`: one `opt_strategy(cpu_replicas=2)` is built before any test runs
  (2 virtual CPU replicas: TensorFlow fixes its logical devices at its first
  op), and every test body runs inside its `scope()`, as a user's code does
  after changing its strategy line (`setUp`/`tearDown` outside it: Keras's
  `setUp` resets TensorFlow's default graph, which drops a scope).
- `ours_own`: no scope; for files that build their own strategy, which the
  runner has rewritten to build ours (`tf.distribute.MirroredStrategy(...)`
  becomes `opt_strategy(cpu_replicas=2)`).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types

import pytest

MODE_ENV = "TFDIST_KERAS_TESTS_MODE"
_KERAS_MARKS = (
    "requires_trainable_backend: Keras's mark for tests that train",
    "skip_if_backend(backend, reason): Keras's mark for backend skips",
    "extra_large: Keras's mark for its largest tests",
)
_state: dict = {}

# `trainer_test.py` imports jax at module level and uses it only in its
# JAX-backend branches; without jax installed an empty module stands in so
# the file's TensorFlow tests run (a JAX-only test then fails by name).
# Any attribute read raises ImportError, as the real import would: Keras's
# `try: import jax; jax.monitoring ... except ImportError` stays quiet.
if importlib.util.find_spec("jax") is None:
    _jax = types.ModuleType("jax", "tfdist_opt keras tests: jax is not installed")

    def _missing(name):
        raise ImportError(f"jax is not installed (jax.{name} was read)")

    _jax.__getattr__ = _missing
    sys.modules["jax"] = _jax


def pytest_configure(config):
    for mark in _KERAS_MARKS:
        config.addinivalue_line("markers", mark)
    if os.environ.get(MODE_ENV) == "ours":
        import tfdist_opt

        _state["strategy"] = tfdist_opt.opt_strategy(cpu_replicas=2)


def pytest_report_header(config):
    strategy = _state.get("strategy")
    mode = os.environ.get(MODE_ENV, "plain")
    jax = sys.modules.get("jax")
    stub = " (jax: empty stand-in)" if "tfdist_opt" in (getattr(jax, "__doc__", "") or "") else ""
    if strategy is None:
        return f"tfdist_opt keras tests: mode={mode}{stub}"
    return (
        f"tfdist_opt keras tests: mode={mode}, every test inside "
        f"{type(strategy).__name__}.scope() on {strategy.num_replicas_in_sync} replicas{stub}"
    )


def _in_scope(strategy, fn):
    """`fn` run inside `strategy.scope()`.

    A test that calls `keras.backend.clear_session()` in its body resets
    TensorFlow's default graph, and with it the graph's strategy stack, so
    leaving the scope then finds nothing to pop: that `IndexError` is the
    test's reset, not a failure under the strategy.
    """

    def run(*args, **kwargs):
        scope = strategy.scope()
        scope.__enter__()
        try:
            return fn(*args, **kwargs)
        finally:
            try:
                scope.__exit__(None, None, None)
            except IndexError:
                pass

    return run


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    """Runs the test body inside the strategy's scope, after `setUp`.

    Keras's `TestCase.setUp` calls `clear_session()`, which resets the
    default graph and drops a scope entered before it; so the test function
    itself is wrapped (`item.obj`, which pytest also sets as the unittest
    test method), and `setUp`, `tearDown` and fixtures run outside the
    scope.
    """
    strategy = _state.get("strategy")
    if strategy is not None:
        # pytest calls `item.obj`; for a unittest-style test it first sets
        # it as the test method on its instance, which `run()` calls after
        # `setUp`.
        item.obj = _in_scope(strategy, item.obj)
    yield
