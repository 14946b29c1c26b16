"""Whether a Ray cluster's nodes can ever hold the workers a launch asks for.

Ray places each Ray Train worker as one bundle on one node (1 CPU by
default, `{"GPU": K}` with `--gpus-per-worker K`) and, when no node has
room, waits for one without a word: `tfdist-opt launch --ray ADDRESS -n 2`
on a cluster of one 1-CPU node waited silently for minutes. The launcher
checks the nodes' totals right after joining (`check_room`) and stops with
the numbers instead. Totals, not what is free now: a bundle another job
holds is freed when that job ends. Pure Python: it reads `ray.nodes()`
records.
"""

from __future__ import annotations

from typing import Mapping, Sequence


def room(nodes: Sequence[Mapping], per_worker: Mapping[str, float]) -> int:
    """How many workers asking `per_worker` each the alive `nodes` can hold."""
    asks = {k: float(v) for k, v in per_worker.items() if v}
    total = 0
    for node in nodes:
        if not node.get("Alive"):
            continue
        have = node.get("Resources") or {}
        total += min((int(have.get(k, 0) // v) for k, v in asks.items()), default=0)
    return total


def _describe(nodes: Sequence[Mapping], per_worker: Mapping[str, float]) -> str:
    parts = []
    for node in nodes:
        if node.get("Alive"):
            have = node.get("Resources") or {}
            held = ", ".join(f"{k} {have.get(k, 0):g}" for k in sorted(per_worker))
            parts.append(f"{node.get('NodeManagerAddress', '?')}: {held}")
    return "; ".join(parts) or "no node alive"


def check_room(
    nodes: Sequence[Mapping], min_workers: int, per_worker: Mapping[str, float], workers: str
) -> None:
    """Raises when the alive nodes can never hold `min_workers` workers.

    Args:
        nodes: sequence of `ray.nodes()` records (`Alive`, `Resources`,
            `NodeManagerAddress`).
        min_workers: int. Workers the run needs to start (N, or MIN of
            MIN:MAX).
        per_worker: mapping. What each worker asks Ray for, e.g. `{"CPU": 1}`.
        workers: str. The `-n` value, for the message.

    Raises:
        ValueError: too few nodes / CPUs / GPUs, naming what each worker
            asks, what each node has and how many workers fit.
    """
    asks = {k: float(v) for k, v in per_worker.items() if v}
    if not asks:
        return
    fits = room(nodes, asks)
    if fits >= min_workers:
        return
    ask = ", ".join(f"{k} {v:g}" for k, v in sorted(asks.items()))
    raise ValueError(
        f"Invalid value for `-n`: {min_workers} Ray worker(s) asking {{{ask}}} "
        f"each do not fit the Ray cluster: its nodes hold {fits} "
        f"({_describe(nodes, asks)}; ray.nodes()). Received: -n {workers}. "
        f"Expected at most {fits} worker(s), or more nodes "
        "(`ray start --address=...`) or resources (`ray start --num-cpus` / "
        "`--num-gpus`)."
    )
