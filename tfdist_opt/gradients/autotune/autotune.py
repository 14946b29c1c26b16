"""Measured pack-size autotune: time candidate sizes on the real shapes.

Horovod's autotune searches fusion-buffer size and cycle time with Bayesian
optimisation while training. We tune the one knob that matters here
(`bytes_per_pack`) over a geometric grid (`packing.candidate_pack_sizes`):
for each candidate, all-reduce zero tensors of the model's gradient shapes
and dtypes (after compression) `iters` times after `warmup` untimed runs,
take the median, keep the fastest. Every worker measures; the figures are
then averaged over workers (`timing.time_and_agree`) so every worker picks
the same size (a worker picking differently would trace different
collectives and hang). The chief writes every trial to a CSV.

It runs when the optimizer is built (`fit` builds it before step 1) on a
multi-worker strategy with `bytes_per_pack="auto"`; on one host the
all-reduce is an in-memory reduction and packing has no measurable effect,
so the `auto` policy alone is used there.
"""

from __future__ import annotations

import csv
import os
from typing import Sequence

from absl import logging
import tensorflow as tf

from tfdist_opt.gradients.collectives import collectives
from tfdist_opt.gradients.collectives import packing
from tfdist_opt.gradients.autotune import timing
from tfdist_opt.strategy import topology

CSV_FIELDS = ("bytes_per_pack", "num_packs", "median_s", "min_s", "max_s", "iters", "chosen")


def time_all_reduce(
    strategy: tf.distribute.Strategy,
    shapes: Sequence[tuple[tuple[int, ...], str]],
    codec: collectives.Codec,
    bytes_per_pack: int,
    warmup: int = 2,
    iters: int = 5,
) -> timing.Timing:
    """Times the all-reduce of zeros with these shapes (agreed everywhere).

    Args:
        strategy: the strategy whose collectives to time.
        shapes: list of (shape, dtype name) pairs: the gradients.
        codec: `collectives.Codec`. The wire dtype.
        bytes_per_pack: int. The pack size to time.
        warmup: int. Untimed runs first (tracing, connection set-up).
        iters: int. Timed runs.
    """
    with strategy.scope():
        tensors = [tf.zeros(s, d) for s, d in shapes]
    layer = collectives.Collectives(strategy, codec, collectives.Packing(bytes_per_pack))

    def replica_fn():
        out = layer.all_reduce_sum(tensors)
        # One scalar back, so the timing includes every collective.
        return tf.add_n(
            [tf.reduce_sum(tf.cast(o[..., :1] if o.shape.rank else o, tf.float32)) for o in out]
        )

    return timing.time_and_agree(strategy, replica_fn, iters, warmup)


def tune(
    strategy: tf.distribute.Strategy,
    shapes: Sequence[tuple[tuple[int, ...], str]],
    codec: collectives.Codec,
    candidates: Sequence[int] | None = None,
    warmup: int = 2,
    iters: int = 5,
    csv_path: str | None = None,
) -> tuple[int, list[dict]]:
    """Times every candidate pack size and returns the fastest.

    Returns:
        (best bytes_per_pack, list of trial rows as in `CSV_FIELDS`).
    """
    sizes = [_nbytes(s, d, codec) for s, d in shapes]
    if candidates is None:
        candidates = packing.candidate_pack_sizes(sizes)
    rows = []
    for b in candidates:
        t = time_all_reduce(strategy, shapes, codec, b, warmup, iters)
        rows.append(
            {
                "bytes_per_pack": b,
                "num_packs": len(packing.assign_buckets(sizes, packing.fixed_policy(b))),
                "median_s": t.median_s,
                "min_s": t.min_s,
                "max_s": t.max_s,
                "iters": iters,
            }
        )
    best = packing.choose_fastest([(r["bytes_per_pack"], r["median_s"]) for r in rows])
    for row in rows:
        row["chosen"] = int(row["bytes_per_pack"] == best)
        logging.info(
            "tfdist_opt autotune: bytes_per_pack=%d packs=%d median=%.2f ms%s",
            row["bytes_per_pack"],
            row["num_packs"],
            1e3 * row["median_s"],
            " <- chosen" if row["chosen"] else "",
        )
    if csv_path and topology.strategy_is_chief(strategy):
        write_csv(csv_path, rows)
    return best, rows


def write_csv(path: str, rows: Sequence[dict]) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k) for k in CSV_FIELDS})


def maybe_tune_for_variables(
    strategy, variables, codec: collectives.Codec, csv_path: str | None = None
) -> int | None:
    """Autotunes on a multi-worker strategy; None where it does not apply.

    Runs eagerly only (`fit` builds the optimizer before its first step);
    the caller keeps the result (`keras_binding.GradientBinding`).
    """
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return None
    if num_workers(strategy) < 2 or not tf.executing_eagerly():
        return None
    best, _ = tune(strategy, shapes_of(variables), codec, warmup=1, iters=3, csv_path=csv_path)
    return best


def shapes_of(variables) -> list[tuple[tuple[int, ...], str]]:
    """(shape, dtype name) of each variable: what `tune` times."""
    return [(tuple(v.shape), _dtype_name(v)) for v in variables]


def num_workers(strategy) -> int:
    """Worker processes in the strategy's cluster (chief + workers), >= 1.

    From the public `strategy.cluster_resolver` (MultiWorkerMirroredStrategy
    has one); 1 when there is no cluster.
    """
    resolver = getattr(strategy, "cluster_resolver", None)
    spec = resolver.cluster_spec().as_dict() if resolver is not None else {}
    n = sum(len(spec.get(job, ())) for job in ("chief", "worker"))
    return max(1, n)


def _dtype_name(v) -> str:
    d = getattr(v, "dtype", "float32")
    return d if isinstance(d, str) else tf.as_dtype(d).name


def _nbytes(shape, dtype, codec: collectives.Codec) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n * codec.wire_of(tf.as_dtype(dtype)).size
