"""benchmarks/allreduce.py on 2 real workers at tiny sizes, and its bus factor."""

import json

import pytest

from benchmarks import common
from tests.multiworker import harness

BINARY = "benchmarks/allreduce.py"


@pytest.mark.parametrize("n,factor", [(1, 1.0), (2, 1.0), (3, 4 / 3), (4, 1.5), (8, 1.75)])
def test_bus_factor_is_2_n_minus_1_over_n(n, factor):
    # The binary's busbw = algbw * bus_factor(n): at n = 2 the factor is 1,
    # so only n > 2 tells a missing or wrong factor apart.
    assert common.bus_factor(n) == pytest.approx(factor)


@pytest.mark.multiworker
@pytest.mark.slow
def test_two_workers_report_all_sections(tmp_path):
    args = [
        BINARY,
        "--model=small",
        "--max_bytes=262144",
        "--iters=3",
        "--warmup=1",
        "--tcp_bytes=4194304",
        "--tcp_trials=1",
        f"--output_json={tmp_path / 'ar.json'}",
        f"--csv={tmp_path / 'ar.csv'}",
        f"--autotune_csv={tmp_path / 'tune.csv'}",
        "--num_channels_per_target=2",
        "--recv_buf_max_chunk=-1",
    ]
    results = harness.run_workers(2, args, timeout_s=240)
    for r in results:
        assert r.returncode == 0, r.output[-3000:]
    report = json.loads((tmp_path / "ar.json").read_text())
    summary = report["summary"]
    for key in (
        "speedup_pack",
        "speedup_bf16",
        "speedup_malloc",
        "busbw_fraction_of_loopback",
        "tcp_gbps",
        "best_busbw_gbps",
        "best_busbw_gbps_default_malloc",
        "best_busbw_gbps_no_mmap",
    ):
        assert summary[key] > 0, key
    assert summary["num_replicas"] == 2
    # Every model row says what it put on the wire; PowerSGD sends less.
    model = {
        r["setting"]: r for r in report["results"] if r["section"] == "model" and "sent_bytes" in r
    }
    psgd = [k for k in model if k.startswith("ours_powersgd_rank")]
    assert len(psgd) == 1
    assert 0 < model[psgd[0]]["sent_bytes"] < model["tf_default_fp32"]["sent_bytes"]
    sweep = [r for r in report["results"] if r["section"] == "sweep"]
    assert {r["setting"] for r in sweep} == {
        "tf_default_fp32",
        "tf_default_fp32_tuned_malloc",
        "tf_default_fp32_no_mmap",
        "ours_streams",
    }
    assert summary["num_channels_per_target"] == 2
    assert summary["recv_buf_max_chunk"] == -1
    assert sorted({r["bytes"] for r in sweep}) == [4096, 16384, 65536, 262144]
    for r in sweep:  # nccl-tests convention: busbw = algbw * 2(n-1)/n, n = 2
        assert r["busbw_gbps"] == pytest.approx(
            r["algbw_gbps"] * common.bus_factor(summary["num_replicas"])
        )
    assert (tmp_path / "ar.csv").exists() and (tmp_path / "tune.csv").exists()
    # Progress: the chief prints one line per sweep size and model row.
    chief = results[0].output
    # 4 settings x 4 sizes: the total counts every one (it once said 8).
    assert "progress 8/16 (50%) sweep tf_default_fp32_tuned_malloc 262144 B" in chief
    assert "progress 16/16 (100%) sweep ours_streams 262144 B" in chief
    assert summary["best_busbw_gbps_ours_streams"] > 0
    assert "progress 10/10 (100%) model local_concat_split_only" in chief
    assert "progress " not in results[1].output
