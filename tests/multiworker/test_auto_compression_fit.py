"""`compression="auto"` on 2 real workers over loopback: it measures, then picks none.

scripts/auto_compression_fit.py fits a small mlp (64-wide: 38 KB of
gradients, so the step is compute and latency, not bytes) with
`TFDIST_OPT_COMPRESSION=auto`. After the warm-up the chief prints one
start line naming the choice, `(exact)`, the measured link rate and the
predicted step of each candidate; both workers end with `"none"` and the
same weights. (On an emulated 1 Gbit/s link with a wide mlp it picks a
compressed one: tests/hosts/test_auto_compression_hosts.py.)
"""

import pytest

from tests.multiworker import harness

pytestmark = [pytest.mark.multiworker, pytest.mark.slow]

SCRIPT = "tests/multiworker/scripts/auto_compression_fit.py"


def test_loopback_and_a_small_model_pick_none_on_every_worker():
    results = harness.run_workers(
        2,
        [SCRIPT, "64", "2", "64", "12"],
        timeout_s=240,
        extra_env={"TFDIST_OPT_COMPRESSION": "auto"},
    )
    runs = harness.results_by_mode(results)
    assert [r["auto"]["compression"] for r in runs] == ["none", "none"], runs
    assert runs[0]["auto"]["checksum"] == runs[1]["auto"]["checksum"]
    # The function traced again after the pick is the one traced first:
    # no XLA (the model never asked).
    for run in runs:
        assert run["auto"]["jit_compile"] is False, run
    chief = results[0].output
    lines = [l for l in chief.splitlines() if "tfdist_opt: compression=auto picked" in l]
    assert len(lines) == 1, chief[-3000:]
    assert "picked none (exact): link " in lines[0] and "predicted step none " in lines[0]
    # The chief only: one line per job.
    assert "compression=auto picked" not in results[1].output
