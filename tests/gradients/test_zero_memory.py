"""Guard: sharded optimizer state lowers the step's peak memory.

Two fresh processes (scripts/zero_memory.py), unsharded and
`shard_optimizer_state=True`, each fitting benchmarks/memory.py's
25.2M-parameter MLP with Adam on 2 in-process CPU replicas (3 steps), with
TensorFlow's BFC allocator so the peak bytes of live tensors and variables
are known. The peak saved must be at least half the optimizer-state bytes
sharded away (192 MiB over both replicas).

Measured: before the bucket-at-a-time step the sharded peak was 1032 MiB
against 832 unsharded (ratio -1.04: the transient buffers cost more than
the shards saved; this test failed so); after, 712 against 896 (0.96).
Bytes, not time, but the peak depends on how the two replicas' ops
interleave: with TF's default thread pools the ratio ranged 0.52-1.17
over six runs and fell below 0.5 once beside other tests; with one
inter-op and one intra-op thread (`TF_NUM_INTEROP_THREADS`,
`TF_NUM_INTRAOP_THREADS`) it ranged 0.71-0.88 over four (about 25 s). The peak RSS of each
process is printed beside it (RSS also holds what the C library keeps,
docs/guides/memory.md).
"""

import json
import os
import subprocess

import pytest

from tests.multiworker import harness

SCRIPT = os.path.join("tests", "gradients", "scripts", "zero_memory.py")


def _run(shard, tmp_path):
    out = tmp_path / f"shard{shard}.json"
    p = subprocess.run(
        [*harness.python(warm=False), SCRIPT, str(shard), str(out)],
        cwd=harness.REPO_ROOT,
        env={k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
        | {
            "TF_CPP_MIN_LOG_LEVEL": "2",
            "TF_NUM_INTEROP_THREADS": "1",
            "TF_NUM_INTRAOP_THREADS": "1",
        },
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.slow
def test_sharded_state_saves_at_least_half_its_bytes_at_the_peak(tmp_path):
    plain, shard = _run(0, tmp_path), _run(1, tmp_path)
    state_saved = 2 * (plain["state_bytes_per_replica"] - shard["state_bytes_per_replica"])
    ratio = (plain["tf_peak_bytes"] - shard["tf_peak_bytes"]) / state_saved
    mib = {k: (plain[k] >> 20, shard[k] >> 20) for k in ("tf_peak_bytes", "peak_rss_bytes")}
    print(f"peak MiB (unsharded, sharded): {mib}; state saved {state_saved >> 20} MiB")
    assert ratio >= 0.5, (ratio, mib)
