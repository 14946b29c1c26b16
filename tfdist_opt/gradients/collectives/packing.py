"""Bucket (pack) planning for the gradient all-reduce: pure decisions.

No TensorFlow import: every function takes gradient sizes in bytes and
returns plain Python values, so the policy is tested in milliseconds.

Why buckets at all: each pack is one collective over one concatenated
tensor (TF's `CollectiveReplicaLauncher.batch_all_reduce`); smaller packs
pipeline better and start as soon as their gradients exist, too small ones
pay a per-collective latency, so the time per step has a broad minimum at
a few MiB per pack on a RING (measured by `benchmarks/allreduce.py`, the
`autotune` rows; figures in docs/benchmarks.md).

Policies:

* fixed (`bytes_per_pack=B > 0`): TF's `group_by_size` rule, kept exactly
  (a pack closes once it holds *more* than B bytes), so our packing and
  TF's give the same collectives.
* `0`: one pack holding everything (TF's default).
* `auto` (`auto_pack_policy`): PyTorch DDP's shape (a small first bucket,
  then larger ones), in *reverse* variable order because backprop produces
  the last layer's gradients first, so the first collective can start
  while earlier layers are still being differentiated. Sizes come from the
  model's total gradient bytes: aim for about `TARGET_PACKS` packs, clamped
  to [`MIN_BUCKET`, `MAX_BUCKET`]. The measured autotune
  (`tfdist_opt.gradients.autotune.autotune`) then times `candidate_pack_sizes()` on
  the real shapes and keeps the fastest.

ZeRO's reduce-scatter has its own grouping (`scatter_buckets`: bounded
buckets per dtype, backprop order; `column_pieces`: one large gradient's
`[n, s]` layout cut by columns), as its buckets bound memory, not latency.

References:
    Li et al. 2020, "PyTorch Distributed: Experiences on Accelerating Data
    Parallel Training" (gradient bucketing, 25 MB default, small first
    bucket). Horovod Tensor Fusion and autotune (Sergeev & Del Balso 2018).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

KIB = 1024
MIB = 1024 * 1024

FIRST_BUCKET = 1 * MIB
MIN_BUCKET = 256 * KIB
MAX_BUCKET = 4 * MIB
TARGET_PACKS = 8


@dataclasses.dataclass(frozen=True)
class PackPolicy:
    """How gradients are grouped into all-reduce packs.

    Attributes:
        bucket_bytes: int. Target pack size; 0 puts everything in one pack.
        first_bucket_bytes: int or None. Size of the first pack, if it
            differs (DDP's small first bucket). None: same as the others.
        reverse: bool. Fill packs from the last variable backwards.
        reason: str. Why, for the log.
    """

    bucket_bytes: int
    first_bucket_bytes: int | None = None
    reverse: bool = False
    reason: str = ""

    def describe(self) -> str:
        if self.bucket_bytes == 0:
            return "one pack"
        first = f", first {_fmt(self.first_bucket_bytes)}" if self.first_bucket_bytes else ""
        order = ", reverse order" if self.reverse else ""
        return f"packs of {_fmt(self.bucket_bytes)}{first}{order}"


def fixed_policy(bytes_per_pack: int) -> PackPolicy:
    """TF's own packing for an explicit `bytes_per_pack` (0: one pack)."""
    if (
        isinstance(bytes_per_pack, bool)
        or not isinstance(bytes_per_pack, int)
        or bytes_per_pack < 0
    ):
        raise ValueError(
            "Invalid value for `bytes_per_pack`: expected a non-negative int. "
            f"Received: bytes_per_pack={bytes_per_pack!r}"
        )
    return PackPolicy(
        bucket_bytes=bytes_per_pack, reason=f"bytes_per_pack={bytes_per_pack} requested"
    )


def auto_pack_policy(sizes: Sequence[int]) -> PackPolicy:
    """DDP-style buckets sized from the gradients' byte sizes.

    Args:
        sizes: sequence of int. Bytes of each gradient, in variable order.

    Returns:
        A `PackPolicy`: about `TARGET_PACKS` packs within
        [`MIN_BUCKET`, `MAX_BUCKET`], a first pack of at most
        `FIRST_BUCKET`, reverse order.

    Example:
        >>> auto_pack_policy([13 * MIB]).bucket_bytes == 1703936
        True
    """
    total = int(sum(sizes))
    if total <= MIN_BUCKET:
        return PackPolicy(0, reason=f"{_fmt(total)} of gradients: one pack")
    bucket = min(MAX_BUCKET, max(MIN_BUCKET, _round_kib(total / TARGET_PACKS)))
    first = min(FIRST_BUCKET, bucket)
    return PackPolicy(
        bucket_bytes=bucket,
        first_bucket_bytes=first,
        reverse=True,
        reason=(
            f"{_fmt(total)} in {len(sizes)} gradients: ~{TARGET_PACKS} "
            f"packs clamped to [{_fmt(MIN_BUCKET)}, {_fmt(MAX_BUCKET)}], "
            f"first {_fmt(first)}, reverse (backprop) order"
        ),
    )


def assign_buckets(sizes: Sequence[int], policy: PackPolicy) -> list[list[int]]:
    """Groups gradient indices into packs.

    A pack closes once it holds more than its target (TF's `group_by_size`
    rule: packs err on the large side), so with `first_bucket_bytes=None`
    and `reverse=False` the grouping is exactly TF's for the same bytes.

    Args:
        sizes: sequence of int. Bytes of each gradient, in variable order.
        policy: `PackPolicy`.

    Returns:
        List of packs, each a list of indices into `sizes`; every index
        appears exactly once. Indices inside a pack follow the fill order.

    Example:
        >>> assign_buckets([4, 4, 4], PackPolicy(bucket_bytes=5))
        [[0, 1], [2]]
    """
    order = list(range(len(sizes)))
    if policy.reverse:
        order.reverse()
    if not order:
        return []
    if policy.bucket_bytes == 0:
        return [order]
    packs: list[list[int]] = []
    filled = 0
    target = policy.first_bucket_bytes or policy.bucket_bytes
    for i in order:
        if packs and filled > target:
            packs.append([])
            filled = 0
            target = policy.bucket_bytes
        if not packs:
            packs.append([])
        packs[-1].append(i)
        filled += int(sizes[i])
    return packs


def candidate_pack_sizes(sizes: Sequence[int]) -> list[int]:
    """The autotune grid: powers of 4 from 256 KiB up to the total, plus 0.

    A geometric grid suits a single knob with a broad, flat optimum (time
    per step against pack size varies by tens of percent between 1 and
    25 MiB, `benchmarks/allreduce.py`): a factor of 4 between neighbours
    keeps the grid to about 6 trials for a 100 MB model while landing near
    the curve's minimum.

    Returns:
        Sorted distinct pack sizes in bytes; 0 (one pack) first.
    """
    total = int(sum(sizes))
    out = [0]
    b = MIN_BUCKET
    while b < total:
        out.append(b)
        b *= 4
    return out


def choose_fastest(trials: Sequence[tuple[int, float]]) -> int:
    """The pack size with the smallest time; ties go to the larger pack.

    Args:
        trials: sequence of (bytes_per_pack, seconds).

    Raises:
        ValueError: no trials.
    """
    if not trials:
        raise ValueError(
            "Invalid value for `trials`: expected at least one "
            "(bytes_per_pack, seconds) pair. Received: []"
        )
    return min(trials, key=lambda t: (t[1], -t[0] if t[0] else -math.inf))[0]


def scatter_buckets(dtypes: list[str], nbytes: list[int], max_bytes: int) -> list[list[int]]:
    """Which gradients share one reduce-scatter collective.

    Per dtype, in reverse variable order (backprop produces the last
    layer's gradient first, so the first bucket can start before backprop
    ends), a bucket closes before it would exceed `max_bytes`; a gradient
    larger than that is a bucket of its own. `max_bytes <= 0`: one bucket
    per dtype.

    Example:
        >>> scatter_buckets(["float32"] * 4, [8, 8, 8, 40], 16)
        [[3], [2, 1], [0]]
    """
    out: list[list[int]] = []
    open_: dict[str, tuple[list[int], int]] = {}
    for i in reversed(range(len(dtypes))):
        members, used = open_.get(dtypes[i], ([], 0))
        if members and max_bytes > 0 and used + nbytes[i] > max_bytes:
            out.append(members)
            members, used = [], 0
        open_[dtypes[i]] = (members + [i], used + nbytes[i])
    out.extend(m for m, _ in open_.values() if m)
    return out


def column_pieces(
    shard_size_: int, num_replicas: int, itemsize: int, max_bytes: int
) -> list[tuple[int, int]]:
    """Column ranges `[lo, hi)` of one gradient's `[n, s]` reduce-scatter layout.

    Each range's all-to-all moves at most `max_bytes` (`n * (hi - lo) *
    itemsize`, at least one column); `max_bytes <= 0`: one range.

    Example:
        >>> column_pieces(10, 2, 4, 32)
        [(0, 4), (4, 8), (8, 10)]
    """
    if max_bytes <= 0:
        return [(0, shard_size_)]
    cols = max(1, max_bytes // (num_replicas * itemsize))
    return [(lo, min(lo + cols, shard_size_)) for lo in range(0, shard_size_, cols)]


def _round_kib(x: float) -> int:
    return int(math.ceil(x / KIB)) * KIB


def _fmt(n: int | None) -> str:
    if n is None:
        return "-"
    if n >= MIB:
        return f"{n / MIB:.3g} MiB"
    if n >= KIB:
        return f"{n / KIB:.3g} KiB"
    return f"{n} B"
