"""`compression="auto"` between two emulated hosts on a 1 Gbit/s link: a compressed pick.

Both hosts fit a wide mlp (1024-wide, two hidden layers: 8.4 MB of float32
gradients a step, ~70 ms on the wire at 1 Gbit/s) with
`TFDIST_OPT_COMPRESSION=auto` (tests/multiworker/scripts/auto_compression_fit.py).
After the warm-up, every worker must apply the same compressed choice
(bf16 or PowerSGD; PowerSGD from update 0 here, so its compressed branch
runs), the chief must say it is lossy on its start line, and training must
go on to the end with the same weights on both hosts.
"""

import json
import math
import sys

import pytest

from tests.hosts import per_host

pytestmark = [pytest.mark.multiworker, pytest.mark.slow]

HOSTS = 2
HOST_RATE = "1gbit"
SCRIPT = "tests/multiworker/scripts/auto_compression_fit.py"


def test_a_1gbit_link_picks_a_compressed_one_on_both_workers_and_trains(testbed):
    workers = [f"{h.address}:2222" for h in testbed.hosts]
    procs = []
    for i, host in enumerate(testbed.hosts):
        env = per_host.host_env(
            {
                "TF_CONFIG": json.dumps(
                    {"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}}
                ),
                "TFDIST_OPT_COMPRESSION": "auto",
                "TFDIST_OPT_POWERSGD_START_STEP": "0",
            }
        )
        procs.append(
            testbed.popen(host, [sys.executable, SCRIPT, "1024", "2", "32", "16"], env=env)
        )
    outs = per_host.finish(testbed, procs, timeout=240)
    for code, text in outs:
        assert code == 0, text[-3000:]
    runs = [per_host.results(text)[0] for _, text in outs]
    picks = [r["compression"] for r in runs]
    assert picks[0] == picks[1] and picks[0] in ("bf16", "powersgd"), outs[0][1][-3000:]
    assert runs[0]["checksum"] == runs[1]["checksum"]
    # The pick is what the optimizer runs: its chain holds the stage.
    stage = {"bf16": "Cast", "powersgd": "PowerSGD"}[picks[0]]
    assert all(stage in r["stages"] for r in runs), [r["stages"] for r in runs]
    assert [r["jit_compile"] for r in runs] == [False] * 2
    assert all(math.isfinite(v) for r in runs for v in r["loss"])
    line = next(l for l in outs[0][1].splitlines() if "compression=auto picked" in l)
    assert f"picked {picks[0]} (LOSSY: " in line and "link " in line, line
    assert "compression=auto picked" not in outs[1][1]
