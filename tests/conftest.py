"""Test-session set-up shared by every test module.

In-process TensorFlow tests share one runtime, and virtual CPU devices can be
configured only before it starts, so the session gets 4 logical CPU devices
here, once, before any test runs an op (TF refuses to change logical
devices after its runtime starts). Tests that need a
different process set-up (tf_keras, multi-worker) run in subprocesses.
"""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

NUM_VIRTUAL_CPUS = 4


def _is_xdist_controller(config) -> bool:
    """True in pytest-xdist's controller, which runs no test (its workers do)."""
    workers = getattr(config.option, "numprocesses", None)
    return bool(workers) and not hasattr(config, "workerinput")


def pytest_collection_modifyitems(config, items):
    """Files that start real clusters first (stable; a file stays whole).

    With `--dist loadfile` xdist hands out whole files in collection order;
    the long cluster files first and the many short ones last keeps both
    processes busy to the end instead of one finishing a 60 s file alone.
    """
    heavy = {item.path for item in items
             if item.get_closest_marker("multiworker") or item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in heavy)


def pytest_configure(config):
    if _is_xdist_controller(config):
        return  # each xdist worker process sets up its own runtime
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * NUM_VIRTUAL_CPUS)
    except RuntimeError:  # already initialised (e.g. a plugin ran an op)
        pass
    # Initialise the runtime now, so no later opt_strategy(cpu_replicas=k)
    # call can re-configure the session to k devices.
    assert len(tf.config.list_logical_devices("CPU")) == NUM_VIRTUAL_CPUS


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _isolated_environment():
    """Whatever a test writes to os.environ (TF_CONFIG, TFDIST_OPT_*) is undone."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(scope="session")
def strategy():
    """One 2-replica MirroredStrategy (ReductionToOneDevice) for in-process tests.

    Shared because several MirroredStrategy instances using TF's default
    collective all-reduce in one process can collide on collective instance
    keys ("Shape mismatch in the collective instance ...").
    """
    import tfdist_opt

    return tfdist_opt.opt_strategy(cpu_replicas=2, mode="mirrored",
                                   all_reduce="reduce_to_one")
