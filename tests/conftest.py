"""Test-session set-up shared by every test module.

In-process TensorFlow tests share one runtime, and virtual CPU devices can be
configured only before it starts, so the session gets 4 logical CPU devices
here, once, before any test runs an op (TF refuses to change logical
devices after its runtime starts). Tests that need a
different process set-up (tf_keras, multi-worker) run in subprocesses.
"""

import gc
import os

from tests.warm_python import GRAPPLER_ENV

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Ray: keep every address on 127.0.0.1. Ray reads this when it is imported
# (ray_constants) and otherwise turns a loopback node address into the host's
# interface address on purpose; test modules import Ray at collection, so it
# is set here, before any of them.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# Every process a test starts inherits this: a crash (SIGSEGV, SIGABRT, ...)
# prints each thread's Python stack to its stderr, which the tests put in
# their failure messages (a CI run once lost a one-process run to a SIGSEGV
# with nothing more than the exit code -11).
os.environ.setdefault("PYTHONFAULTHANDLER", "1")

NUM_VIRTUAL_CPUS = 4

# Grappler, TensorFlow's graph optimizer, runs on every function graph at its
# first call; on the suite's small graphs that is CPU spent for nothing: the
# Keras option matrix's one-process run (tests/multiworker/scripts/
# keras_matrix.py, plain Keras and Mirrored), run alternately, took 42.3/42.1 s
# with it and 35.7/36.2 s without (forked warm: 34.9/36.5 s and 32.8/29.9 s).
# The tests check our math and orchestration, which must not depend on graph
# rewrites, so this process and the processes it forks warm
# (tests/warm_python.py) run with it off. Tests marked `grappler` (the
# 2-workers-equal-one-process tests of Keras fit, gradient packing and
# accumulation, PowerSGD, ZeRO and parameter servers) start their processes
# with it on, as users run, and so does every process started with the real
# interpreter (the README's main job, the CLI). `TFDIST_TEST_GRAPPLER=1 pytest`
# runs the whole suite with it on.
GRAPPLER_RUN = os.environ.get(GRAPPLER_ENV) == "1"

# GPUs. The suite checks CPU behaviour: virtual CPU devices, RING
# collectives, float32 sums compared bit for bit between processes. On a
# host with GPUs they are hidden from this pytest run and from every process it
# starts (set before TensorFlow is imported; subprocesses inherit it), so
# `pytest` there checks the same thing. With TFDIST_OPT_TEST_GPUS=1 the GPUs
# stay visible and only the tests marked `gpu` (which assert the GPU
# behaviour where GPUs are visible) run; the others skip, saying why.
TEST_GPUS = os.environ.get("TFDIST_OPT_TEST_GPUS") == "1"
if not TEST_GPUS:
    os.environ["CUDA_VISIBLE_DEVICES"] = "-1"
_GPU_SKIP = (
    "TFDIST_OPT_TEST_GPUS=1 keeps the GPUs visible, and this test checks "
    "CPU behaviour (virtual CPU devices, RING, exact float32 sums); "
    "run it without the variable (GPUs hidden)"
)


def pytest_report_header(config):
    if TEST_GPUS:
        return "tfdist_opt: GPUs visible (TFDIST_OPT_TEST_GPUS=1): only `gpu` tests run"
    return (
        "tfdist_opt: GPUs hidden (CUDA_VISIBLE_DEVICES=-1); "
        "TFDIST_OPT_TEST_GPUS=1 runs the `gpu` tests on them"
    )


def _is_xdist_controller(config) -> bool:
    """True in pytest-xdist's controller, which runs no test (its workers do)."""
    workers = getattr(config.option, "numprocesses", None)
    return bool(workers) and not hasattr(config, "workerinput")


# Seconds each of the longest files took in full runs here (2 cores, `-n 2`/`-n 3`,
# warm subprocesses); only the order of files depends on it.
_FILE_SECONDS = {
    "keras_suite/test_keras_own_tests.py": 900,
    "multiworker/test_ray.py": 140,
    "multiworker/test_ray_elastic.py": 100,
    "multiworker/test_ray_layout.py": 185,
    "multiworker/test_resize_resume.py": 80,
    "multiworker/test_keras_matrix.py": 80,
    "benchmarks/test_train.py": 65,
    "docs/test_worker_examples.py": 60,
    "multiworker/test_stall_abort.py": 55,
    "multiworker/test_callbacks.py": 50,
    "gradients/test_powersgd.py": 45,
    "gradients/test_keras_gradients.py": 40,
    "multiworker/test_stalls.py": 37,
    "parameter_server/test_launch_ps.py": 33,
    "multiworker/test_frozen_chief.py": 32,
    "multiworker/test_shared_saving.py": 32,
    "multiworker/test_keras_fit.py": 32,
    "multiworker/test_preemption.py": 31,
    "multiworker/test_restart_resume.py": 30,
    "benchmarks/test_train_peer.py": 30,
    "benchmarks/test_ps.py": 29,
    "gradients/test_sharded_state.py": 29,
    "callbacks/test_backup_store.py": 28,
    "strategy/test_keras_steps.py": 27,
    "parameter_server/test_keras_fit.py": 27,
    "multiworker/test_sidecar_evaluator.py": 26,
    "parameter_server/test_faults.py": 25,
    "multiworker/test_per_host_saving.py": 24,
    "hosts/test_ray_hosts.py": 230,
    "hosts/test_lost_link.py": 50,
    "hosts/test_per_host_lines.py": 38,
    "hosts/test_ps_hosts.py": 33,
    "slurm/test_slurm_cluster.py": 280,
    "slurm/test_slurm_node_failure.py": 150,
}


def pytest_collection_modifyitems(config, items):
    """Files longest first (stable; a file stays whole).

    With `--dist loadfile --no-loadscope-reorder` xdist hands out whole files
    in this order, two to each process first, then one to whichever process
    is free: the longest files start at once and the many short ones fill
    the end, instead of one process finishing a 150 s file alone (xdist's
    own reorder, by number of tests per file, ran the one-test Ray elastic
    file last). Files not in `_FILE_SECONDS`: those that start clusters
    before the rest.
    """

    def seconds(item):
        rel = item.path.relative_to(item.config.rootpath / "tests").as_posix()
        if rel in _FILE_SECONDS:
            return _FILE_SECONDS[rel]
        heavy = item.get_closest_marker("multiworker") or item.get_closest_marker("slow")
        return 10 if heavy else 0

    per_file = {}
    for item in items:
        per_file[item.path] = max(per_file.get(item.path, 0), seconds(item))
    items.sort(key=lambda item: -per_file[item.path])
    if TEST_GPUS:
        skip = pytest.mark.skip(reason=_GPU_SKIP)
        for item in items:
            if not item.get_closest_marker("gpu"):
                item.add_marker(skip)


_WARM = []


def _start_warm_manager(config) -> None:
    """One zygote manager for the whole run.

    Test subprocesses started through `tests.warm_python.PYTHON` fork from
    zygotes that imported TensorFlow once (see that module). The xdist
    controller (or the one pytest process under `-n 0`) runs the manager,
    keeps the zygotes and kills them at the end; its workers, started after
    this hook, inherit its address, so a zygote serves both (one per key
    a run, not one per key per worker: each start is a TensorFlow import,
    ~4 CPU-s, and a wait for the test that asked).
    """
    import tempfile

    from tests import warm_manager
    from tests import warm_python

    if hasattr(config, "workerinput") and os.environ.get(warm_python.MANAGER_ENV):
        return  # an xdist worker: the controller's manager
    _WARM.append(warm_manager.Manager(tempfile.mkdtemp(prefix="tfdist-warm-")))
    os.environ[warm_python.MANAGER_ENV] = _WARM[0].path


def pytest_configure(config):
    _start_warm_manager(config)
    if _is_xdist_controller(config):
        return  # each xdist worker process sets up its own runtime
    import tensorflow as tf

    tf.config.optimizer.set_experimental_options({"disable_meta_optimizer": not GRAPPLER_RUN})
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * NUM_VIRTUAL_CPUS
        )
    except RuntimeError:  # already initialised (e.g. a plugin ran an op)
        pass
    # Initialise the runtime now, so no later opt_strategy(cpu_replicas=k)
    # call can re-configure the session to k devices.
    assert len(tf.config.list_logical_devices("CPU")) == NUM_VIRTUAL_CPUS


def pytest_unconfigure(config):
    import shutil

    for manager in _WARM:
        manager.close()
        shutil.rmtree(manager.dir, ignore_errors=True)
    _WARM.clear()


import pytest  # noqa: E402


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """A `grappler` test's processes (module fixtures' too) run with Grappler on."""
    if GRAPPLER_RUN:
        return
    if item.get_closest_marker("grappler"):
        os.environ[GRAPPLER_ENV] = "1"
    else:
        os.environ.pop(GRAPPLER_ENV, None)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Lists every skipped test, grouped by its reason, so no skip hides.

    Runs in the process that reports (pytest-xdist's controller, which holds
    its workers' reports, or the one process under `-n 0`). Expected
    failures (`xfail`) are not skips and are not listed.
    """
    by_reason: dict[str, list[str]] = {}
    for report in terminalreporter.stats.get("skipped", []):
        if hasattr(report, "wasxfail"):
            continue
        longrepr = report.longrepr
        reason = (
            longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
        )
        reason = reason.removeprefix("Skipped: ")
        by_reason.setdefault(reason, []).append(report.nodeid)
    if not by_reason:
        return
    total = sum(map(len, by_reason.values()))
    terminalreporter.section(f"{total} skipped, by reason", sep="-")
    for reason, ids in sorted(by_reason.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        terminalreporter.write_line(f"{len(ids)} x {reason}")
        for nodeid in sorted(ids):
            terminalreporter.write_line(f"    {nodeid}")


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    """After each file (its module fixtures gone): collect, then freeze what lives on.

    A test process accumulates TensorFlow's and Keras's objects over hundreds
    of in-process tests (~620k after tests/gradients and tests/callbacks);
    each full collection walked them all, and tests that trace or allocate
    much triggered one after another: those two folders took 194 s and 32 s
    of full collections, 132 s and 8 s with this (run side by side, `-n 0`).
    Objects alive at a file's end are moved out of the collector's sight
    (`gc.freeze`); what a later test creates is collected as usual.
    """
    if nextitem is None or nextitem.path != item.path:
        gc.collect()
        gc.freeze()


@pytest.fixture
def fake_gpus(monkeypatch):
    """`fake_gpus(n)`: TensorFlow's physical device list reports n GPUs.

    What the product reads to detect GPUs (`tf.config.list_physical_devices`),
    so a test can take its GPU branch on a host without one (for code that
    only plans or reports; nothing can run on a fake GPU).
    """
    import tensorflow as tf

    real = tf.config.list_physical_devices

    def install(n):
        fakes = [
            tf.config.PhysicalDevice(name=f"/physical_device:GPU:{i}", device_type="GPU")
            for i in range(n)
        ]
        monkeypatch.setattr(
            tf.config,
            "list_physical_devices",
            lambda device_type=None: fakes if device_type == "GPU" else real(device_type),
        )
        return [d.name for d in fakes]

    return install


def host_gpus() -> list:
    """The GPUs this pytest run sees (none unless TFDIST_OPT_TEST_GPUS=1)."""
    import tensorflow as tf

    return [d.name for d in tf.config.list_physical_devices("GPU")]


@pytest.fixture(autouse=True)
def _isolated_environment():
    """Whatever a test writes to os.environ (TF_CONFIG, TFDIST_OPT_*) is undone."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture
def no_tf_config(monkeypatch):
    """No TF_CONFIG and no TFDIST_OPT_* variable: `opt_strategy()` sees a plain host.

    Use with `pytestmark = pytest.mark.usefixtures("no_tf_config")`.
    """
    monkeypatch.delenv("TF_CONFIG", raising=False)
    for name in list(os.environ):
        if name.startswith("TFDIST_OPT_"):
            monkeypatch.delenv(name)


@pytest.fixture(scope="session")
def strategy():
    """One 2-replica MirroredStrategy (ReductionToOneDevice) for in-process tests.

    Shared because several MirroredStrategy instances using TF's default
    collective all-reduce in one process can collide on collective instance
    keys ("Shape mismatch in the collective instance ...").
    """
    import tfdist_opt

    return tfdist_opt.opt_strategy(cpu_replicas=2, mode="mirrored", all_reduce="reduce_to_one")
