"""A backup written by 2 workers resumes on 1 with the same math.

The script (tests/multiworker/scripts/rel_train.py) batches its dataset by
the global batch (8), so the number of steps per epoch and the examples of
each step do not depend on the worker count; the per-replica batch follows
the size (4 on 2 workers, 8 on 1). A backup records the position in train
calls of the epoch and the optimizer step, both size-independent, and the
model and optimizer variables (SGD momentum: one copy, not per replica).
So 2 workers crash after step 10, 1 worker resumes from the step-8 backup,
and the result equals an uninterrupted run within 1e-5 (float32 additions
in another order). The same holds for per-replica optimizer state: a
`grad_accum` cycle cut mid-way (accumulators saved per replica, restored
as their sum / n at another replica count) and ZeRO-1 momentum shards
(saved whole, re-split). With a fixed replica count (`replicas=2`) the
1-worker resume runs 2 logical CPU replicas: PowerSGD with a bf16 wire,
whose rounding is per replica, and accumulators restored replica for
replica. This is what a Ray elastic restart at another size
(`launch --ray -n 1:2`) does after a lost node.
"""

import json

import numpy as np
import pytest

from tests.multiworker import harness

pytestmark = [pytest.mark.multiworker, pytest.mark.slow]

SCRIPT = "tests/multiworker/scripts/rel_train.py"


# (opt_strategy kwargs, crash after this optimizer step, the backup resumed,
#  optimizer steps in the whole run)
CASES = {
    "plain": ({}, 10, 8, 36),
    # 3 micro-batches per step: the step-8-calls backup is 2 steps + 2 of 3
    # micro-batches, its accumulators summed over the 2 replicas.
    "grad_accum_mid_cycle": ({"grad_accum": 3}, 3, 2, 12),
    # ZeRO-1 over `replicas=4`: 2 workers x 2 logical CPU replicas each
    # hold a quarter of every momentum slot; a backup holds the whole slot,
    # re-split for 1 worker x 4 replicas.
    "zero_replicas4": ({"shard_optimizer_state": True, "replicas": 4}, 10, 8, 36),
    # A fixed replica count (`replicas=2`): 1 worker resumes with 2 logical
    # CPU replicas, so PowerSGD's per-replica residuals (rank 1 from step 0:
    # they matter) and what each step sends (bf16: rounded per replica) are
    # those of the 2-worker run; a grad_accum cycle is cut mid-way too.
    # Without `replicas` this run ends 4.7e-4 away.
    "replicas_powersgd_accum": (
        dict(
            replicas=2,
            compression="powersgd",
            powersgd_rank=1,
            powersgd_start_step=0,
            powersgd_min_compression=0,
            powersgd_wire="bf16",
            grad_accum=3,
        ),
        3,
        2,
        12,
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_two_worker_backup_resumes_on_one_worker(tmp_path, case):
    kwargs, crash_step, resumed_step, steps = CASES[case]
    extra = ["--strategy-kwargs", json.dumps(kwargs)]
    backup = tmp_path / "bk"
    # The uninterrupted one-process reference runs while the two workers do
    # (they mostly wait on each other's collectives).
    with harness.alongside(
        harness.run_single,
        [SCRIPT, "--out", str(tmp_path / "ref"), "--backup", str(tmp_path / "ref-bk"), *extra],
        timeout_s=180,
    ) as ref_run:
        p = harness.start_launch(
            2,
            [],
            [
                SCRIPT,
                "--out",
                str(tmp_path / "two"),
                "--backup",
                str(backup),
                *extra,
                "--crash-task",
                "1",
                "--crash-at-step",
                str(crash_step),
            ],
        )
        out, err = harness.finish_launch(p, timeout=240)
        ref = ref_run.result()
    logs = out[-2000:] + err[-3000:]
    assert p.returncode == 1, logs
    assert (tmp_path / "two" / "crash-1").exists(), logs

    p = harness.start_launch(
        1, [], [SCRIPT, "--out", str(tmp_path / "one"), "--backup", str(backup), *extra]
    )
    out, err = harness.finish_launch(p, timeout=240)
    assert p.returncode == 0, out[-2000:] + err[-3000:]
    with open(tmp_path / "one" / "attempt-0-worker-0.json") as f:
        resumed = json.load(f)
    assert resumed["replicas"] == kwargs.get("replicas", 1)
    assert resumed["step"] == steps
    assert resumed["restored"]["step"] == resumed_step, resumed["restored"]

    assert ref.returncode == 0, ref.output[-3000:]
    with open(tmp_path / "ref" / "attempt-0-worker-0.json") as f:
        want = json.load(f)
    for a, b in zip(resumed["weights"], want["weights"]):
        np.testing.assert_allclose(np.array(a), np.array(b), rtol=0, atol=1e-5)
