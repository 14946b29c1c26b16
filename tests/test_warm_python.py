"""tests/warm_python.py: a forked child behaves as `python script.py` would.

The suite's multi-process tests start their workers through it, so what
they check holds only if the child sees what a fresh interpreter sees:
argv, `__main__`, sys.path, the environment, stdin/stdout, exit codes,
signals, and a zygote whose import-time environment matches the client's.
"""

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from tests import conftest
from tests import warm_python
from tests.multiworker import harness

PROBE = textwrap.dedent("""
    import json, os, sys, tempfile
    import tensorflow as tf
    print(json.dumps({
        "argv": sys.argv, "main": __name__, "file": globals().get("__file__"),
        "path0": sys.path[0], "in_path": os.environ.get("WARM_TEST_DIR", "") in sys.path,
        "foo": os.environ.get("WARM_TEST_FOO"), "cwd": os.getcwd(),
        "pid": os.getpid(), "stdin": sys.stdin.readline().strip(),
        "warm": "tensorflow" in sys.modules and os.environ.get("WARM_TEST_FOO") is not None,
        "level": os.environ.get("TF_CPP_MIN_LOG_LEVEL"),
        "tmp": tempfile.gettempdir(),
        "zygote": os.getppid()}), flush=True)
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    if what == "raise":
        raise ValueError("boom")
    if what == "exit":
        sys.exit(7)
    if what == "sleep":
        import time
        time.sleep(60)
""")


@pytest.fixture
def probe(tmp_path):
    path = tmp_path / "probe.py"
    path.write_text(PROBE)
    return path


def _run(args, env_extra=None, input_text="hello\n", cwd=None, timeout=120):
    env = dict(os.environ, WARM_TEST_FOO="bar", TF_CPP_MIN_LOG_LEVEL="2")
    env.update(env_extra or {})
    return subprocess.run(
        [*warm_python.PYTHON, *args],
        env=env,
        input=input_text,
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
    )


def _fields(p):
    return json.loads(p.stdout.splitlines()[0])


def test_the_child_sees_what_python_script_py_sees(probe, tmp_path):
    p = _run(
        [str(probe), "a", "b"],
        env_extra={"PYTHONPATH": str(tmp_path / "extra"), "WARM_TEST_DIR": str(tmp_path / "extra")},
        cwd=str(tmp_path),
    )
    assert p.returncode == 0, p.stderr[-2000:]
    got = _fields(p)
    assert got["argv"] == [str(probe), "a", "b"]
    assert got["main"] == "__main__" and got["file"] == str(probe)
    assert got["path0"] == str(tmp_path) and got["in_path"]  # PYTHONPATH applied
    assert got["foo"] == "bar" and got["cwd"] == str(tmp_path)
    assert got["stdin"] == "hello"
    assert got["pid"] != os.getpid() and got["zygote"] != os.getpid()


def test_module_and_code_forms(tmp_path):
    p = _run(["-c", "import sys; print('code', sys.argv)", "x"])
    assert p.returncode == 0 and p.stdout.strip() == "code ['-c', 'x']", p.stderr
    (tmp_path / "warmmod.py").write_text("import sys\nprint('mod', __name__, sys.argv)\n")
    p = _run(["-m", "warmmod", "y"], env_extra={"PYTHONPATH": str(tmp_path)})
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == f"mod __main__ ['{tmp_path}/warmmod.py', 'y']"


def test_exit_codes_and_tracebacks_are_the_interpreters(probe):
    p = _run([str(probe), "raise"])
    assert p.returncode == 1 and "ValueError: boom" in p.stderr
    assert _run([str(probe), "exit"]).returncode == 7
    p = _run([str(probe) + ".missing"])
    real = subprocess.run(
        [sys.executable, str(probe) + ".missing"], capture_output=True, text=True, timeout=60
    )
    assert (p.returncode, p.stderr) == (real.returncode, real.stderr) == (2, real.stderr)


@contextlib.contextmanager
def _sleeping(probe):
    """(client, child pid) of a warm `probe.py sleep`; the client is killed after."""
    env = dict(os.environ, WARM_TEST_FOO="bar", TF_CPP_MIN_LOG_LEVEL="2")
    p = subprocess.Popen(
        [*warm_python.PYTHON, str(probe), "sleep"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        yield p, json.loads(p.stdout.readline())["pid"]
    finally:
        p.kill()
        p.wait()


def test_signals_reach_the_child_and_its_death_is_the_clients(probe):
    with _sleeping(probe) as (p, child):
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=30) == -signal.SIGTERM
        assert harness.wait_gone(child, timeout=10)


def test_a_killed_client_takes_its_child_with_it(probe):
    with _sleeping(probe) as (p, child):
        os.killpg(p.pid, signal.SIGKILL)  # SIGKILL cannot be forwarded
        assert p.wait(timeout=30) == -signal.SIGKILL
        assert harness.wait_gone(child, timeout=10), "the child outlived its SIGKILLed client"


def test_an_import_time_variable_gets_its_own_zygote(probe):
    a = _fields(_run([str(probe)]))
    b = _fields(_run([str(probe)]))
    c = _fields(_run([str(probe)], env_extra={"TF_CPP_MIN_LOG_LEVEL": "1"}))
    assert a["zygote"] == b["zygote"]  # forked from one warm process
    assert c["zygote"] != a["zygote"] and c["level"] == "1"
    # A job's tasks never share a zygote (nor, so, a hash seed).
    d = _fields(
        _run(
            [str(probe)],
            env_extra={"TF_CONFIG": '{"cluster": {}, "task": {"type": "worker", "index": 1}}'},
        )
    )
    assert d["zygote"] not in (a["zygote"], c["zygote"])


def test_the_temp_dir_is_the_clients_and_shares_the_zygote(probe, tmp_path):
    """A test that gives each worker its own TMPDIR still forks a warm process."""
    dirs = [tmp_path / "t1", tmp_path / "t2"]
    for d in dirs:
        d.mkdir()
    a, b = (_fields(_run([str(probe)], env_extra={"TMPDIR": str(d)})) for d in dirs)
    assert (a["tmp"], b["tmp"]) == (str(dirs[0]), str(dirs[1]))
    assert a["zygote"] == b["zygote"]


def test_what_it_cannot_serve_runs_the_real_interpreter():
    p = _run(["-u", "-c", "import sys; print(sys.orig_argv[1:3])"])
    assert p.returncode == 0 and p.stdout.strip() == "['-u', '-c']", p.stderr
    env = {k: v for k, v in os.environ.items() if k != warm_python.MANAGER_ENV}
    p = subprocess.Popen(
        [*warm_python.PYTHON, "-c", "import os; print(os.getpid())"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 0 and int(out) == p.pid  # the client exec'd the interpreter


def test_a_childs_own_python_children_fork_warm_too(probe, tmp_path):
    """A script that starts `sys.executable script.py` (the benchmarks' peers,
    a launcher's workers) gets a warm child too; `-c` code runs the real
    interpreter (the launcher's small watchdogs)."""
    outer = tmp_path / "outer.py"
    outer.write_text(
        textwrap.dedent(f"""
        import os, subprocess, sys
        print(os.path.basename(sys.executable), os.getpid(), flush=True)
        subprocess.run([sys.executable, {str(probe)!r}], input="hi\\n", text=True,
                       check=True, timeout=120)
        subprocess.run([sys.executable, "-c", "import sys; print('tensorflow' in sys.modules)"],
                       check=True, timeout=120)
    """)
    )
    p = _run([str(outer)])
    assert p.returncode == 0, p.stderr[-2000:]
    first, probed, code = p.stdout.splitlines()
    name, pid = first.split()
    assert name == "python"  # what `launch --ray` accepts as a Python command
    got = json.loads(probed)
    assert got["stdin"] == "hi" and got["foo"] == "bar", got
    assert got["zygote"] != int(pid)  # forked by a zygote, not started by outer.py
    assert code == "False"  # the real interpreter: nothing imported


def test_the_zygote_holds_the_package_but_not_its_keras_wiring():
    """A plain-Keras reference run must see an unwired Keras."""
    p = _run(["-c", "import json, sys; print(json.dumps(sorted(sys.modules)))"])
    assert p.returncode == 0, p.stderr[-2000:]
    mods = set(json.loads(p.stdout))
    assert "tfdist_opt" in mods  # imported once, in the zygote
    wiring = {
        "tfdist_opt.strategy.build",
        "tfdist_opt.keras.keras_compat",
        "tfdist_opt.gradients.binding.keras_binding",
        "tfdist_opt.gradients.binding.hooks",
    }
    assert not wiring & mods, wiring & mods


def test_xdist_workers_use_the_controllers_manager(request):
    """Under pytest-xdist no worker runs a manager of its own: each zygote
    key starts once a run for both workers, not once per worker."""
    if not hasattr(request.config, "workerinput"):
        pytest.skip("not an xdist worker (-n 0): this process runs the manager")
    assert conftest._WARM == []  # pylint: disable=protected-access
    manager = os.environ[warm_python.MANAGER_ENV]
    assert os.path.exists(manager), manager


GRAPPLER_PROBE = (
    "import tensorflow as tf; "
    "print(tf.config.optimizer.get_experimental_options()"
    ".get('disable_meta_optimizer', False))"
)


def _grappler_off_in_child(env_extra=None):
    p = _run(["-c", GRAPPLER_PROBE], env_extra=env_extra)
    assert p.returncode == 0, p.stderr[-2000:]
    return p.stdout.strip()


@pytest.mark.skipif(conftest.GRAPPLER_RUN, reason="TFDIST_TEST_GRAPPLER=1: on everywhere")
def test_grappler_is_off_in_this_process_and_its_warm_children():
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    assert tf.config.optimizer.get_experimental_options()["disable_meta_optimizer"]
    assert warm_python.GRAPPLER_ENV not in os.environ
    assert _grappler_off_in_child() == "True"
    assert _grappler_off_in_child({warm_python.GRAPPLER_ENV: "1"}) == "False"


@pytest.mark.grappler
def test_a_grappler_tests_children_run_it():
    assert os.environ.get(warm_python.GRAPPLER_ENV) == "1"
    assert _grappler_off_in_child() == "False"
