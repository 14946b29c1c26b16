"""Every program under docs/examples/ runs, as a user runs it.

One-machine examples run as `python docs/examples/NAME.py` on 2 virtual CPUs
(`TFDIST_OPT_CPU_REPLICAS=2`); the worker examples under `tfdist-opt launch`
(2 workers; with a ps task; with an evaluator). Each test checks what the
page says the example does, not just its exit code.
"""

import os
import pathlib
import re
import signal
import subprocess
import sys

import pytest

from tests.multiworker import harness

EXAMPLES = pathlib.Path(harness.REPO_ROOT) / "docs" / "examples"
TWO_CPUS = {"TFDIST_OPT_CPU_REPLICAS": "2"}
_ONE_MACHINE = {"quickstart", "configuration", "gradients", "powersgd", "sharded_state",
                "input_pipeline", "callbacks", "fault_tolerance", "model_parallel"}
_WORKERS = {"multi_worker", "parameter_server", "sidecar_evaluation", "ray_trainer"}


def _run(name, *args, extra_env=TWO_CPUS):
    r = harness.run_single([str(EXAMPLES / f"{name}.py"), *map(str, args)],
                           timeout_s=240, extra_env=extra_env)
    assert r.returncode == 0, r.output[-4000:]
    return r.output


def test_every_example_has_a_test():
    assert {p.stem for p in EXAMPLES.glob("*.py")} == _ONE_MACHINE | _WORKERS


def test_quickstart_trains_on_two_replicas():
    out = _run("quickstart")
    losses = [float(x) for x in re.findall(r"- loss: ([\d.]+)", out)]
    assert "replicas: 2 " in out and len(losses) == 3 and losses[-1] < losses[0], out


def test_configuration_sources_and_error():
    out = _run("configuration")
    assert "mirrored 2 reduce_to_one" in out  # keyword beat the environment
    assert "mirrored over ('/cpu:0', '/cpu:1')" in out
    assert "Invalid value for `num_packs`: expected a positive int. Received: num_packs=0" in out


def test_gradients_one_update_per_two_micro_batches():
    out = _run("gradients")
    assert "updates: 8" in out, out  # 2 epochs x 8 micro-batches / grad_accum=2


def test_powersgd_trains():
    out = _run("powersgd")
    losses = [float(x) for x in re.findall(r"- loss: ([\d.]+)", out)]
    assert len(losses) == 2 and losses[1] < losses[0], out


def test_sharded_state_keeps_half_a_slot_per_replica():
    out = _run("sharded_state")
    assert "first Adam slot per replica: (1024,) of kernel (32, 64)" in out, out


def test_input_pipeline_trains():
    out = _run("input_pipeline")
    assert out.count("8/8") == 2, out  # 512 examples / 64 per step, both epochs


def test_callbacks_report_throughput_and_learning_rate():
    out = _run("callbacks")
    assert re.search(r"lr: 0\.0200", out), out  # 0.01 x 64 / 32 after warm-up
    assert re.search(r"examples/sec: [\d.]+", out), out


@pytest.mark.slow
def test_fault_tolerance_resumes_where_it_stopped(tmp_path):
    first = _run("fault_tolerance", tmp_path, 1)
    assert "optimizer steps so far: 8" in first, first
    second = _run("fault_tolerance", tmp_path, 2)
    assert "Epoch 1/2" not in second and "Epoch 2/2" in second, second
    assert "optimizer steps so far: 16" in second, second


def test_model_parallel_places_stages_on_two_devices():
    out = _run("model_parallel", extra_env={})
    assert "device:CPU:0'" in out and "device:CPU:1'" in out, out


# ------------------------------------------------------------ workers
def _launch(options, name, *args, timeout=240):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=harness.REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("TF_CONFIG", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tfdist_opt", "launch", *options, "--startup-timeout", "120",
         "--", sys.executable, str(EXAMPLES / f"{name}.py"), *map(str, args)],
        env=env, cwd=harness.REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=10)
    assert proc.returncode == 0, out[-4000:]
    return out


@pytest.mark.multiworker
def test_multi_worker_example_on_two_workers():
    out = _launch(["-n", "2"], "multi_worker")
    hashes = dict(re.findall(r"(worker:\d) weights_sha256 (\w+)", out))
    assert sorted(hashes) == ["worker:0", "worker:1"], out
    assert len(set(hashes.values())) == 1, out


@pytest.mark.multiworker
@pytest.mark.slow
def test_parameter_server_example_on_chief_workers_and_ps():
    out = _launch(["--workers", "2", "--ps", "1"], "parameter_server")
    assert "[chief 0] chief: iterations 16 " in out, out
    for task in ("worker 0", "worker 1", "ps 0"):
        assert f"[{task}] tfdist_opt: {task.replace(' ', ':')}: the chief finished" in out


@pytest.mark.multiworker
@pytest.mark.slow
def test_sidecar_example_evaluates_every_checkpoint(tmp_path):
    out = _launch(["-n", "2", "--evaluator"], "sidecar_evaluation", tmp_path)
    for epoch in (1, 2, 3):
        assert f"evaluator: weights.0{epoch}.weights.h5 (step {epoch})" in out, out
    assert "[evaluator 0] evaluator: last metrics {'accuracy':" in out, out


@pytest.mark.multiworker
@pytest.mark.slow
def test_ray_trainer_example_on_two_ray_workers():
    pytest.importorskip("ray.train")
    from tests.multiworker import ray_cluster  # pylint: disable=g-import-not-at-top

    import shutil  # pylint: disable=g-import-not-at-top
    import tempfile  # pylint: disable=g-import-not-at-top

    tmp = tempfile.mkdtemp(prefix="rayex")  # short: Ray's socket paths live here
    try:
        r = harness.run_single([str(EXAMPLES / "ray_trainer.py")], timeout_s=240,
                               extra_env=ray_cluster.env(RAY_TMPDIR=tmp))
    finally:
        left = ray_cluster.leftovers(tmp)
        ray_cluster.kill_tagged(tmp)
        shutil.rmtree(tmp, ignore_errors=True)
    assert not left, left
    assert r.returncode == 0, r.output[-4000:]
    losses = dict(re.findall(r"rank (\d): 2 replicas, loss ([\d.]+)", r.output))
    assert sorted(losses) == ["0", "1"] and len(set(losses.values())) == 1, r.output[-4000:]
    assert "error: None" in r.output
