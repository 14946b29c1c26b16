"""zero_plan (pure): shard sizes cover every element once; bytes; refusals."""

import pytest

from tfdist_opt.gradients.zero import zero_plan
from tfdist_opt.strategy.config import StrategyConfig


@pytest.mark.parametrize("size,n", [(1, 2), (10, 4), (12, 4), (7, 3), (1000003, 8)])
def test_shards_cover_every_element_once(size, n):
    s = zero_plan.shard_size(size, n)
    bounds = [zero_plan.shard_bounds(size, n, r) for r in range(n)]
    assert bounds[0][0] == 0 and bounds[-1][1] == size
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
    assert all(hi - lo <= s for lo, hi in bounds)
    assert zero_plan.padded_size(size, n) - size < n


def test_state_bytes_is_one_nth_plus_padding():
    sizes = [4096 * 4096, 4096, 1]
    full = zero_plan.state_bytes(sizes, 4, 2, sharded=False, scalar_bytes=12)
    half = zero_plan.state_bytes(sizes, 4, 2, sharded=True, scalar_bytes=12)
    assert full == sum(sizes) * 4 + 12
    assert half <= full / 2 + 16


def test_refusals_name_what_was_received():
    with pytest.raises(NotImplementedError, match="Adafactor.*Received: optimizer=Adafactor"):
        zero_plan.check_optimizer("Adafactor", False, None)
    with pytest.raises(NotImplementedError, match="`use_ema`.*Received: use_ema=True"):
        zero_plan.check_optimizer("Adam", True, None)
    with pytest.raises(ValueError, match="`compression`.*Received: compression='powersgd'"):
        StrategyConfig(shard_optimizer_state=True, compression="powersgd")
    with pytest.raises(ValueError, match="`grad_accum`.*Received: grad_accum=4"):
        StrategyConfig(shard_optimizer_state=True, compression="bf16", grad_accum=4)
    StrategyConfig(shard_optimizer_state=True, compression="fp16")


def test_row_aligned_shards_cover_every_element_once():
    for shape, n in [((4096, 1024), 2), ((1025, 8), 2), ((300, 5), 3)]:
        unit = zero_plan.row_unit(shape, n)
        assert unit == shape[1]
        size = shape[0] * shape[1]
        s = zero_plan.shard_size(size, n, unit)
        assert s % unit == 0
        bounds = [zero_plan.shard_bounds(size, n, r, unit) for r in range(n)]
        assert bounds[0][0] == 0 and bounds[-1][1] == size
        assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))
        assert n * s - size <= 0.01 * size + (n - 1) * unit
    # A short leading axis would waste > 1% of the state: flat shards.
    assert zero_plan.row_unit((3, 3, 64, 64), 2) == 1
    assert zero_plan.row_unit((5,), 2) == 1


def test_gather_plan_bounds_each_bucket_and_covers_every_shard():
    # 3 float32 variables, n=2, 64 bytes per gathered bucket: 8 elements
    # per replica per bucket; variable 0 splits at row (unit 2) boundaries,
    # variable 2 (not splittable) stays whole in a bucket of its own.
    dtypes = ["float32", "float16", "float32", "float32"]
    plan = zero_plan.gather_plan(
        dtypes, [4, 2, 4, 4], [12, 3, 4, 10], [2, 1, 1, 1], [True, True, True, False], 2, 64
    )
    covered = {}
    for dtype, pieces in plan:
        used = 0
        for i, start, length, offset in pieces:
            assert dtypes[i] == dtype and offset == used
            covered.setdefault(i, []).append((start, length))
            used += length
        assert 2 * used * 4 <= 64 or len(pieces) == 1
    for i, s in enumerate([12, 3, 4, 10]):
        spans = sorted(covered[i])
        assert spans[0][0] == 0 and sum(length for _, length in spans) == s
    assert all(start % 2 == 0 and length % 2 == 0 for start, length in covered[0])
    assert covered[3] == [(0, 10)]
    assert [d for d, _ in plan].count("float16") == 1
    # Unbounded: one bucket per dtype, in order of first appearance.
    whole = zero_plan.gather_plan(
        dtypes, [4, 2, 4, 4], [12, 3, 4, 10], [2, 1, 1, 1], [True] * 4, 2, 0
    )
    assert [(d, [p[0] for p in ps]) for d, ps in whole] == [
        ("float32", [0, 2, 3]),
        ("float16", [1]),
    ]
    with pytest.raises(ValueError, match="shard_sizes"):
        zero_plan.gather_plan(["float32"], [4], [1, 2], [1], [True], 2, 0)
