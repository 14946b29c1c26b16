"""Every program under docs/examples/ runs, as a user runs it.

One-machine examples run as `python docs/examples/NAME.py` on 2 virtual CPUs
(`TFDIST_OPT_CPU_REPLICAS=2`); the worker examples are in
test_worker_examples.py (a file of their own, so the two halves can run
side by side under `--dist loadfile`). Each test checks what the page says
the example does, not just its exit code, and that the output excerpt the
page shows under the example's command occurs in what it printed
(tests/docs/excerpts.py).
"""

import pathlib
import re

import pytest

from tests.docs import excerpts
from tests.docs.test_worker_examples import WORKERS
from tests.multiworker import harness

EXAMPLES = pathlib.Path(harness.REPO_ROOT) / "docs" / "examples"
TWO_CPUS = {"TFDIST_OPT_CPU_REPLICAS": "2"}
_ONE_MACHINE = {
    "quickstart",
    "configuration",
    "gradients",
    "powersgd",
    "topk_stage",
    "sharded_state",
    "remat_blocks",
    "input_pipeline",
    "callbacks",
    "fault_tolerance",
    "model_parallel",
}


def _run(name, *args, extra_env=TWO_CPUS, excerpt=True):
    r = harness.run_single(
        [str(EXAMPLES / f"{name}.py"), *map(str, args)], timeout_s=240, extra_env=extra_env
    )
    assert r.returncode == 0, r.output[-4000:]
    if excerpt:
        excerpts.assert_excerpt(name, r.output)
    return r.output


def test_every_example_has_a_test():
    assert {p.stem for p in EXAMPLES.glob("*.py")} == _ONE_MACHINE | WORKERS


def test_every_example_has_its_command_and_one_output_excerpt():
    shown = excerpts.excerpts()
    assert set(shown) == _ONE_MACHINE | WORKERS, set(shown) ^ (_ONE_MACHINE | WORKERS)
    for name, places in shown.items():
        assert len(places) == 1, (name, [page for page, _ in places])
        page = (EXAMPLES.parents[1] / places[0][0]).read_text()
        commands = [
            body
            for lang, body in re.findall(r"^```(\w*)\n(.*?)^```$", page, re.M | re.S)
            if lang == "bash"
        ]
        assert any(f"python docs/examples/{name}.py" in c for c in commands), (
            f"{places[0][0]} shows the output of docs/examples/{name}.py but no "
            "```bash block with its command"
        )


@pytest.mark.parametrize(
    "lines,output,missing",
    [
        (["updates: 8"], "Epoch 2/2\nupdates: 8\n", []),
        (["updates: 8"], "updates: 9\n", ["updates: 8"]),
        (["...", "8/8 - … - loss: …"], "8/8 - 1s - 12ms/step - loss: 0.52\n", []),
        (["replicas: 2 loss: …"], "replicas: 1 loss: 0.3\n", ["replicas: 2 loss: …"]),
        (["a … b"], "a\nb\n", ["a … b"]),  # `…` stays within one line
    ],
)
def test_excerpt_lines_match_exactly_but_for_the_ellipsis(lines, output, missing):
    assert excerpts.missing_lines(lines, output) == missing


def test_quickstart_trains_on_two_replicas():
    out = _run("quickstart")
    losses = [float(x) for x in re.findall(r"- loss: ([\d.]+(?:e[-+]\d+)?)", out)]
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
    losses = [float(x) for x in re.findall(r"- loss: ([\d.]+(?:e[-+]\d+)?)", out)]
    assert len(losses) == 2 and losses[1] < losses[0], out
    # 16 updates, the first 2 uncompressed (powersgd_start_step=2).
    assert "compressed updates: 14 of 16" in out, out[-2000:]


def test_topk_stage_trains_and_holds_values_back():
    out = _run("topk_stage")
    losses = [float(x) for x in re.findall(r"- loss: ([\d.]+(?:e[-+]\d+)?)", out)]
    assert len(losses) == 2 and losses[1] < losses[0], out
    assert "values held back for the next step: some" in out, out


def test_sharded_state_keeps_half_a_slot_per_replica():
    out = _run("sharded_state")
    assert "first Adam slot per replica: (1024,) of kernel (32, 64)" in out, out


def test_remat_blocks_train():
    out = _run("remat_blocks")
    assert "4 blocks recomputed; loss fell: True" in out, out


def test_input_pipeline_trains():
    out = _run("input_pipeline")
    assert out.count("8/8") == 2, out  # 512 examples / 64 per step, both epochs


def test_callbacks_report_throughput_and_learning_rate():
    out = _run("callbacks")
    assert re.search(r"lr: 0\.0200", out), out  # 0.01 x 64 / 32 after warm-up
    assert re.search(r"examples/sec: [\d.]+", out), out


@pytest.mark.slow
def test_fault_tolerance_resumes_where_it_stopped(tmp_path):
    first = _run("fault_tolerance", tmp_path, 1, excerpt=False)  # the page shows the 2nd run
    assert "optimizer steps so far: 8" in first, first
    second = _run("fault_tolerance", tmp_path, 2)
    assert "Epoch 1/2" not in second and "Epoch 2/2" in second, second
    assert "optimizer steps so far: 16" in second, second


def test_model_parallel_places_stages_on_two_devices():
    out = _run("model_parallel", extra_env={})
    assert "device:CPU:0'" in out and "device:CPU:1'" in out, out
