"""`benchmarks/collectives_in_flight.py`: collectives in flight on a shaped link.

Where emulated hosts can be made (Linux, root with CAP_NET_ADMIN, iproute2),
one tiny run (1 MB, one round) must report every case with a busbw and a
fraction of the link, record its provenance (commit, resolved
StrategyConfig, machine) like every benchmark, and leave no namespace
behind; elsewhere it skips, saying why.
"""

import json
import os
import subprocess
import sys

import pytest

from benchmarks import testbed_lib

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY = os.path.join(REPO_ROOT, "benchmarks", "collectives_in_flight.py")


def test_one_tiny_round_reports_every_case(tmp_path):
    reason = testbed_lib.unavailable_reason()
    if reason:
        pytest.skip(reason)
    out_json = tmp_path / "inflight.json"
    env = dict(os.environ, PYTHONPATH=REPO_ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("TF_CONFIG", None)
    p = subprocess.Popen(
        [sys.executable, BINARY, "--mb=1", "--rounds=1", "--iters=1", f"--output_json={out_json}"],
        env=env,
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        out, _ = p.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
        pytest.fail(f"collectives_in_flight.py ran past 300 s:\n{out[-3000:]}")
    assert p.returncode == 0, out[-3000:]
    prefix = f"{testbed_lib.PREFIX}{p.pid}x"
    assert not [ns for ns in testbed_lib.namespaces() if ns.startswith(prefix)]
    report = json.loads(out_json.read_text())
    cases = ["one", "one_subdivs4", "chained4", "concurrent2", "concurrent4", "concurrent8"]
    assert [r["case"] for r in report["results"]] == cases
    for row in report["results"]:
        assert row["mb"] == 1 and row["busbw_MBps"] > 0 and 0 < row["link_fraction"] < 1.5, row
    assert report["summary"]["link_fraction_1mb_one"] == report["results"][0]["link_fraction"]
    prov = report["provenance"]
    assert prov["commit"] and prov["strategy_config"] and prov["machine"]["cpu_count"], prov
