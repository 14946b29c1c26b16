"""Pure packing policy: bucket assignment, auto policy, autotune grid."""

import pytest

from tfdist_opt.gradients.collectives import packing
from tfdist_opt.gradients.collectives.packing import KIB, MIB, PackPolicy


def _tf_group_by_size(sizes, bytes_per_pack):
    # TF's cross_device_utils.group_by_size, on sizes instead of tensors.
    if bytes_per_pack == 0:
        return [list(range(len(sizes)))]
    packs, last = [], 0
    for i, s in enumerate(sizes):
        if not packs or last > bytes_per_pack:
            packs.append([])
            last = 0
        packs[-1].append(i)
        last += s
    return packs


@pytest.mark.parametrize("bpp", [0, 1, 100, 4 * KIB, 1 * MIB])
def test_fixed_policy_matches_tf_group_by_size(bpp):
    sizes = [4, 400, 4096, 36, 1 << 20, 12, 8 << 10, 3 << 20, 4]
    got = packing.assign_buckets(sizes, packing.fixed_policy(bpp))
    assert got == _tf_group_by_size(sizes, bpp)


def test_every_index_exactly_once_in_auto_policy():
    sizes = [(i % 7 + 1) * 300 * KIB for i in range(40)]
    policy = packing.auto_pack_policy(sizes)
    packs = packing.assign_buckets(sizes, policy)
    flat = [i for p in packs for i in p]
    assert sorted(flat) == list(range(40))
    assert flat[0] == 39  # reverse (backprop) order
    assert len(packs) > 4


def test_auto_policy_small_first_bucket_and_clamps():
    policy = packing.auto_pack_policy([13 * MIB])
    assert policy.reverse and policy.first_bucket_bytes == packing.FIRST_BUCKET
    assert packing.MIN_BUCKET <= policy.bucket_bytes <= packing.MAX_BUCKET
    big = packing.auto_pack_policy([100 * MIB])
    assert big.bucket_bytes == packing.MAX_BUCKET
    tiny = packing.auto_pack_policy([10 * KIB, 20 * KIB])
    assert tiny.bucket_bytes == 0 and "one pack" in tiny.reason


def test_first_bucket_is_smaller_than_the_rest():
    sizes = [256 * KIB] * 64  # 16 MiB
    packs = packing.assign_buckets(sizes, packing.auto_pack_policy(sizes))
    first = sum(sizes[i] for i in packs[0])
    second = sum(sizes[i] for i in packs[1])
    assert first < second


def test_fixed_policy_rejects_negative():
    with pytest.raises(ValueError, match=r"Received: bytes_per_pack=-1"):
        packing.fixed_policy(-1)


def test_candidates_and_choice():
    cands = packing.candidate_pack_sizes([100 * MIB])
    assert cands[0] == 0 and cands == sorted(cands)
    assert 4 * MIB in cands and 16 * MIB in cands and len(cands) <= 8
    assert packing.choose_fastest([(0, 3.0), (MIB, 2.0), (4 * MIB, 2.5)]) == MIB
    with pytest.raises(ValueError, match="at least one"):
        packing.choose_fastest([])


def test_describe():
    assert "first 1 MiB" in PackPolicy(4 * MIB, MIB, True).describe()
    assert PackPolicy(0).describe() == "one pack"


def test_autotuned_pack_size_keeps_backprop_order():
    """TF runs a replica's collectives in issue order: the pack holding the
    last layer (whose gradient backprop produces first) must be issued first,
    or every pack waits for the end of backprop."""
    from tfdist_opt.gradients.collectives import collectives

    policy = collectives.Packing("auto", tuned=4096).policy([3000] * 4)
    assert policy.reverse and policy.bucket_bytes == 4096
    assert packing.assign_buckets([3000] * 4, policy)[0][0] == 3


def test_scatter_buckets_reverse_order_bounded_per_dtype():
    assert packing.scatter_buckets(["float32"] * 4, [8, 8, 8, 40], 16) == [[3], [2, 1], [0]]
    assert packing.scatter_buckets(["float32", "bfloat16", "float32"], [4, 4, 4], 0) == [
        [2, 0],
        [1],
    ]
