"""The summary of `benchmarks/memory.py`'s rows: what sharding saved, per task.

Kept apart from the binary, which defines absl flags at import: tests import
this module in processes that also import other benchmark binaries.
"""

from __future__ import annotations

import statistics


def _worst_saved(plain, shard, key):
    """The smallest saving of any worker: per task, its unsharded run's
    smallest `key` minus its sharded run's largest (tasks differ by tens of
    MiB of their own, e.g. the chief's, so tasks are not mixed); None when
    a row lacks `key`."""
    if not all(key in r for r in plain + shard):
        return None
    tasks = sorted({r["task"] for r in plain})
    return min(
        min(r[key] for r in plain if r["task"] == t) - max(r[key] for r in shard if r["task"] == t)
        for t in tasks
    )


def summarize(rows, workers):
    by = {}
    for r in rows:
        by.setdefault(r["setting"], []).append(r)
    plain, shard = by["unsharded"], by["sharded"]
    state_plain = max(r["optimizer_state_bytes_per_replica"] for r in plain)
    state_shard = max(r["optimizer_state_bytes_per_replica"] for r in shard)
    saved = saved_state = state_plain - state_shard
    rss_saved = _worst_saved(plain, shard, "peak_rss_bytes")
    eps_plain = min(r["examples_per_sec"] for r in plain)
    eps_shard = min(r["examples_per_sec"] for r in shard)
    out = {
        "params": plain[0]["params"],
        "state_bytes_unsharded": state_plain,
        "state_bytes_sharded": state_shard,
        "state_bytes_ratio": state_shard / state_plain,
        "state_bytes_goal": 1 / workers + 0.01,
        "state_bytes_saved": saved,
        "peak_rss_saved_bytes": rss_saved,
        "rss_saved_over_state_saved": rss_saved / saved if saved else None,
        "examples_per_sec_unsharded": eps_plain,
        "examples_per_sec_sharded": eps_shard,
        "slowdown": 1 - eps_shard / eps_plain,
    }

    out["steady_rss_saved_bytes"] = _worst_saved(plain, shard, "rss_after_warmup_bytes")
    out["steady_peak_rss_saved_bytes"] = _worst_saved(plain, shard, "steady_peak_rss_bytes")
    for key in ("tf_peak_bytes", "tf_steady_peak_bytes"):
        got = _worst_saved(plain, shard, key)
        if got is not None:
            out[key.replace("_bytes", "_saved_bytes")] = got
            out[key.replace("_bytes", "_saved_over_state_saved")] = got / saved_state
    out["examples_per_sec_median_unsharded"] = statistics.median(
        r["examples_per_sec"] for r in plain
    )
    out["examples_per_sec_median_sharded"] = statistics.median(r["examples_per_sec"] for r in shard)
    for key in ("steady_rss_saved_bytes", "steady_peak_rss_saved_bytes"):
        if out[key] is not None and saved_state:
            out[key.replace("_bytes", "_over_state_saved")] = out[key] / saved_state
    if all("gpu_peak_bytes" in r for r in rows):
        out["gpu_peak_saved_bytes"] = min(r["gpu_peak_bytes"] for r in plain) - max(
            r["gpu_peak_bytes"] for r in shard
        )
    return out
