"""Pure placement decisions: balanced cuts, named cuts, devices, micro-batches."""

import itertools

import pytest

from tfdist_opt.model_parallel import plan


def _brute_force_best(sizes, n):
    best = None
    for cuts in itertools.combinations(range(1, len(sizes)), n - 1):
        starts = (0, *cuts)
        ends = (*cuts, len(sizes))
        stages = [sum(sizes[a:b]) for a, b in zip(starts, ends)]
        if min(stages) > 0 and (best is None or max(stages) < best):
            best = max(stages)
    return best


@pytest.mark.parametrize(
    "sizes,n",
    [
        ([4, 0, 4, 8], 2),
        ([1, 1, 1, 1, 1, 1, 1, 1], 3),
        ([100, 1, 1, 1, 100], 2),
        ([5, 0, 0, 7, 0, 3, 9, 0, 2], 4),
        ([3, 3, 3], 3),
        ([10], 1),
    ],
)
def test_balanced_split_is_optimal(sizes, n):
    p = plan.balanced_split(sizes, n)
    assert p.num_stages == n and p.starts[0] == 0
    assert list(p.starts) == sorted(set(p.starts))
    assert sum(p.stage_bytes) == sum(sizes)
    assert min(p.stage_bytes) > 0
    assert max(p.stage_bytes) == _brute_force_best(sizes, n)


def test_parameter_free_layers_join_the_stage_before():
    p = plan.balanced_split([4, 0, 4], 2)  # Dense, Activation, Dense
    assert p.ranges() == [(0, 2), (2, 3)]
    assert p.largest_stage_fraction == 0.5


def test_balanced_split_refuses_stages_without_variables():
    with pytest.raises(ValueError, match=r"only 2 of its 4 layers have variables"):
        plan.balanced_split([4, 0, 0, 4], 3)
    with pytest.raises(ValueError, match=r"num_stages.*Received: num_stages=0"):
        plan.balanced_split([4], 0)


def test_split_at_names():
    p = plan.split_at_names(["a", "b", "c", "d"], [1, 2, 3, 4], ["c"])
    assert p.ranges() == [(0, 2), (2, 4)] and p.stage_bytes == (3, 7)


@pytest.mark.parametrize(
    "split_at,match",
    [
        (["zz"], r"at layer 'zz': no top-level layer has that name"),
        (["inner"], r"at layer 'inner': it is inside the nested layer 'block'"),
        (["a"], r"distinct, in model order, and not the first layer"),
        (["c", "b"], r"distinct, in model order"),
        (["d"], r"Stage 1 \(layers \['d'\]\) has no variables"),
    ],
)
def test_split_at_refusals(split_at, match):
    with pytest.raises(ValueError, match=match):
        plan.split_at_names(["a", "b", "c", "d"], [1, 2, 3, 0], split_at, nested={"inner": "block"})


def test_resolve_devices():
    gpus, cpus = ["/GPU:0", "/GPU:1"], ["/CPU:0", "/CPU:1", "/CPU:2"]
    assert plan.resolve_devices("auto", 2, gpus, cpus) == gpus
    assert plan.resolve_devices("auto", 3, [], cpus) == cpus
    assert plan.resolve_devices(["/cpu:1", "/cpu:0"], 2, [], cpus) == ["/cpu:1", "/cpu:0"]
    with pytest.raises(
        ValueError,
        match=r"More stages than devices: 3 stages but only "
        r"2 visible GPU",
    ):
        plan.resolve_devices("auto", 3, gpus, cpus)
    with pytest.raises(ValueError, match=r"More stages than devices: 3 stages but 2"):
        plan.resolve_devices(["/cpu:0", "/cpu:1"], 3, [], cpus)
    with pytest.raises(ValueError, match=r"one device per stage \(1\)"):
        plan.resolve_devices(["/cpu:0", "/cpu:1"], 1, [], cpus)
    with pytest.raises(ValueError, match=r"a device appears twice"):
        plan.resolve_devices(["/cpu:0", "/cpu:0"], 2, [], cpus)
    with pytest.raises(ValueError, match=r"Received: devices='gpus'"):
        plan.resolve_devices("gpus", 1, [], cpus)
    with pytest.raises(TypeError, match=r"`devices`"):
        plan.resolve_devices([0, 1], 2, [], cpus)


def test_micro_batches():
    assert plan.validate_micro_batches(4) == 4
    for bad in (0, -1, 2.0, True, "4"):
        with pytest.raises(ValueError, match=r"micro_batches"):
            plan.validate_micro_batches(bad)
    assert plan.micro_batch_bounds(10, 4) == [(0, 2), (2, 5), (5, 7), (7, 10)]
