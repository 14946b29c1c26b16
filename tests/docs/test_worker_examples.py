"""The worker examples under docs/examples/ run, as a user runs them.

Under `tfdist-opt launch` (2 workers; with a ps task; with an evaluator)
and on two Ray workers. Each test checks what the page says the example
does, not just its exit code, and the output excerpt its page shows. The
one-machine examples are in test_examples.py.
"""

import os
import pathlib
import re
import sys

import pytest

from tests.docs import excerpts
from tests.multiworker import harness

EXAMPLES = pathlib.Path(harness.REPO_ROOT) / "docs" / "examples"
WORKERS = {"multi_worker", "parameter_server", "sidecar_evaluation", "ray_trainer"}


def _launch(options, name, *args, timeout=240):
    env = dict(
        os.environ,
        TF_CPP_MIN_LOG_LEVEL="2",
        PYTHONPATH=harness.REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    env.pop("TF_CONFIG", None)
    out = harness.run_group(
        [
            sys.executable,
            "-m",
            "tfdist_opt",
            "launch",
            *options,
            "--startup-timeout",
            "120",
            "--",
            *harness.python(),
            str(EXAMPLES / f"{name}.py"),
            *map(str, args),
        ],
        env=env,
        cwd=harness.REPO_ROOT,
        timeout_s=timeout,
    )
    excerpts.assert_excerpt(name, out)
    return out


@pytest.mark.multiworker
def test_multi_worker_example_on_two_workers():
    out = _launch(["-n", "2"], "multi_worker")
    found = re.findall(r"(worker:\d) weights_sha256 (\w+) after (\d+) steps", out)
    hashes = {task: digest for task, digest, _ in found}
    assert sorted(hashes) == ["worker:0", "worker:1"], out
    assert len(set(hashes.values())) == 1, out
    # Equal hashes alone hold for a fit that runs no step (synced initial
    # weights): 256 examples / global batch 32 x 2 epochs.
    assert [steps for _, _, steps in found] == ["16", "16"], out
    losses = [float(v) for v in re.findall(r"- loss: ([\d.]+(?:e[-+]\d+)?)", out)]
    assert len(losses) == 2 and losses[1] < losses[0], out


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
        r = harness.run_single(
            [str(EXAMPLES / "ray_trainer.py")],
            timeout_s=240,
            extra_env=ray_cluster.env(RAY_TMPDIR=tmp),
        )
    finally:
        left = ray_cluster.leftovers(tmp)
        ray_cluster.kill_tagged(tmp)
        shutil.rmtree(tmp, ignore_errors=True)
    assert not left, left
    assert r.returncode == 0, r.output[-4000:]
    excerpts.assert_excerpt("ray_trainer", r.output)
    losses = dict(re.findall(r"rank (\d): 2 replicas, loss ([\d.]+)", r.output))
    assert sorted(losses) == ["0", "1"] and len(set(losses.values())) == 1, r.output[-4000:]
