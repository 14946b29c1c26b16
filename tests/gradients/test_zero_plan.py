"""zero_plan (pure): shard sizes cover every element once; bytes; refusals."""

import pytest

from tfdist_opt.gradients import zero_plan


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
        zero_plan.check_combination("powersgd", 1)
    with pytest.raises(ValueError, match="`grad_accum`.*Received: grad_accum=4"):
        zero_plan.check_combination("bf16", 4)
    zero_plan.check_combination("fp16", 1)


def test_gather_buckets_one_per_dtype_contiguous():
    buckets = zero_plan.gather_buckets(["float32", "float16", "float32", "float32"],
                                       [3, 2, 4, 1])
    assert [d for d, _ in buckets] == ["float32", "float16"]
    assert buckets[0][1] == [(0, 0, 3), (2, 3, 4), (3, 7, 1)]
    assert buckets[1][1] == [(1, 0, 2)]
    with pytest.raises(ValueError, match="shard_sizes"):
        zero_plan.gather_buckets(["float32"], [1, 2])
