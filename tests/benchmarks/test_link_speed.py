"""`benchmarks/link_speed.py`: speed on emulated hosts with shaped links.

The link bound's arithmetic runs in-process. Where emulated hosts can be
made (Linux, root with CAP_NET_ADMIN, iproute2) one short real run (one
link, one round, a peer and ours, a tiny sweep) checks the summary keys and
that no namespace is left; a failing child run must also leave none. Elsewhere
those skip, saying why.
"""

import json
import os
import subprocess
import sys

import pytest

from benchmarks import link_bound
from benchmarks import testbed_lib

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BINARY = os.path.join(REPO_ROOT, "benchmarks", "link_speed.py")


def test_a_setting_travels_as_its_compression_flag_says():
    # bf16 with 1 MB pieces sends bf16 bytes: its bound is bf16's, not fp32's.
    assert link_bound.payload_kind("bf16_1mb", ("--compression=bf16", "--x=1")) == "bf16"
    assert link_bound.payload_kind("s2_1mb", ("--collective_piece_bytes=1",)) == "s2_1mb"
    assert link_bound.payload_bytes(link_bound.payload_kind("b", ("--compression=bf16",)), 10) == 20


def test_rates_parse_in_tc_units():
    assert link_bound.rate_bytes_per_s("1gbit") == 125e6
    assert link_bound.rate_bytes_per_s("10gbit") == 1.25e9
    assert link_bound.rate_bytes_per_s("500mbit") == 62.5e6
    with pytest.raises(
        ValueError,
        match=r"Invalid value for `link`.*"
        r"Received: link='1gb'",
    ):
        link_bound.rate_bytes_per_s("1gb")


def test_bound_is_the_slower_of_compute_and_link():
    # 23 MB of float32 gradients, 2 workers, 1 Gbit/s: 184 ms on the wire.
    params = 5_791_754
    wire = link_bound.payload_bytes("defaults", params) * link_bound.bus_factor(2)
    b = link_bound.bound(
        wire_bytes=wire, rate=125e6, compute_s=0.1, global_batch=64, measured_eps=239.0
    )
    assert b["link_s"] == pytest.approx(0.1853, abs=1e-3)
    assert b["bound_eps"] == pytest.approx(64 / 0.1853, rel=1e-3)
    assert b["link_fraction"] == pytest.approx(239 * 0.1853 / 64, rel=1e-3)
    assert b["serial_step_s"] == pytest.approx(0.2853, abs=1e-3)
    # bf16 halves the bytes; PowerSGD sends what the run reported.
    assert link_bound.payload_bytes("bf16", params) == 2 * params
    assert link_bound.payload_bytes("powersgd", params, 148424) == 148424
    # Compute-bound: the bound is the compute.
    b = link_bound.bound(
        wire_bytes=1e6, rate=125e6, compute_s=0.2, global_batch=64, measured_eps=160.0
    )
    assert b["bound_step_s"] == 0.2 and b["link_fraction"] == pytest.approx(0.5)


def test_busbw_fraction_is_the_smallest_of_the_large_messages():
    rows = [
        {"setting": "a", "bytes": 4096, "busbw_gbps": 0.001},
        {"setting": "a", "bytes": 4 << 20, "busbw_gbps": 0.1},
        {"setting": "a", "bytes": 16 << 20, "busbw_gbps": 0.11},
        {"setting": "b", "bytes": 16 << 20, "busbw_gbps": 0.01},
    ]
    assert link_bound.busbw_fraction(rows, 125e6, setting="a") == pytest.approx(0.8)
    assert link_bound.busbw_fraction(rows[:1], 125e6) is None


def _ours(pid: int) -> list[str]:
    return [ns for ns in testbed_lib.namespaces() if ns.startswith(f"{testbed_lib.PREFIX}{pid}x")]


def _run(args, timeout_s):
    env = dict(
        os.environ,
        PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
        TF_CPP_MIN_LOG_LEVEL="2",
    )
    env.pop("TF_CONFIG", None)
    p = subprocess.Popen(
        [sys.executable, BINARY, *args],
        env=env,
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        out, _ = p.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
        pytest.fail(f"link_speed.py ran past {timeout_s} s:\n{out[-3000:]}")
    return p.pid, p.returncode, out


def test_bad_link_fails_before_any_host():
    _, rc, out = _run(["--link=1gb"], 60)
    assert rc != 0 and "Invalid value for `--link`" in out, out[-2000:]
    assert "round 1/" not in out


@pytest.fixture
def hosts():
    reason = testbed_lib.unavailable_reason()
    if reason:
        pytest.skip(reason)


def test_one_round_on_one_link_reports_the_bound(hosts, tmp_path):
    out_json = tmp_path / "link.json"
    pid, rc, out = _run(
        [
            "--link=1gbit",
            "--settings=keras3_ctl,defaults,auto",
            "--rounds=1",
            "--model=mlp",
            "--image_size=4",
            "--num_batches=3",
            "--num_warmup_batches=1",
            "--unshaped=false",
            "--sweep_max_bytes=4096",
            f"--output_json={out_json}",
        ],
        400,
    )
    assert rc == 0, out[-3000:]
    assert not _ours(pid)
    report = json.loads(out_json.read_text())
    s = report["summary"]
    for key in (
        "defaults_link_fraction_1gbit",
        "defaults_vs_peer_1gbit",
        "peer_keras3_ctl_eps_1gbit",
        "compute_eps",
        "load_avg_1m_max",
    ):
        assert key in s, sorted(s)
    assert 0 < s["defaults_link_fraction_1gbit"] <= 1.5
    # compression="auto": the chief's start line is read back.
    assert s["auto_picked_1gbit"] in ("none", "bf16", "powersgd"), sorted(s)
    assert "auto_vs_peer_1gbit" in s
    assert s["defaults_vs_peer_1gbit"] == pytest.approx(
        s["defaults_eps_1gbit"] / s["peer_keras3_ctl_eps_1gbit"]
    )
    sweep = [r for r in report["results"] if r.get("bytes") == 4096]
    assert sweep and all(0 < r["busbw_fraction"] < 2 for r in sweep)
    ours = next(r for r in report["results"] if r.get("setting") == "defaults")
    # Host 0 really sent about the gradients' bytes each step.
    assert ours["tx_bytes_per_step"] >= 0.9 * ours["wire_bytes_per_step"]


def test_a_failing_run_leaves_no_namespace(hosts):
    pid, rc, out = _run(
        [
            "--link=1gbit",
            "--settings=defaults",
            "--rounds=1",
            "--model=no_such_model",
            "--sweep=false",
            "--unshaped=false",
        ],
        120,
    )
    assert rc != 0 and "exited with" in out, out[-3000:]
    assert not _ours(pid)
