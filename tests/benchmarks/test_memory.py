"""benchmarks/memory.py's summary (`benchmarks/memory_summary.py`): each worker is compared with itself.

(The guard on the saving itself is tests/gradients/test_zero_memory.py.)
"""

import pytest

from benchmarks import memory_summary


def test_summary_compares_each_task_with_itself():
    mib = 1 << 20
    rows = [
        {
            "setting": s,
            "task": t,
            "optimizer_state_bytes_per_replica": state,
            "peak_rss_bytes": rss,
            "examples_per_sec": 1.0,
            "params": 1,
        }
        for s, state, rss0, rss1 in (
            ("unsharded", 200 * mib, 1000 * mib, 1100 * mib),
            ("sharded", 100 * mib, 920 * mib, 1010 * mib),
        )
        for t, rss in ((0, rss0), (1, rss1))
    ]
    s = memory_summary.summarize(rows, 2)
    # task 0 saves 80 MiB, task 1 90: the worst is 80 (mixing tasks, 1000 - 1010,
    # would say -10).
    assert s["peak_rss_saved_bytes"] == 80 * mib
    assert s["rss_saved_over_state_saved"] == pytest.approx(0.8)
