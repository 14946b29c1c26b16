"""cpu_split: which CPUs and pool sizes each task on a shared host gets (pure)."""

import pytest

from tfdist_opt.strategy.devices import cpu_split
from tfdist_opt.strategy.config import StrategyConfig


def _tf_config(workers, index, chief=None, task_type="worker"):
    cluster = {"worker": workers}
    if chief:
        cluster["chief"] = chief
    return {"cluster": cluster, "task": {"type": task_type, "index": index}}


def test_loopback_names_are_one_host_and_other_hosts_are_not_counted():
    cfg = _tf_config(["localhost:1", "127.0.0.1:2", "[::1]:3", "node2:4"], 2)
    assert cpu_split.local_tasks(cfg) == (3, 2)
    assert cpu_split.local_tasks(_tf_config(["h1:1", "H1:2", "h2:3"], 2)) == (1, 0)


def test_chief_comes_first_and_other_roles_are_not_split():
    cfg = _tf_config(["localhost:2", "localhost:3"], 0, chief=["localhost:1"])
    assert cpu_split.local_tasks(cfg) == (3, 1)
    cfg["task"] = {"type": "chief", "index": 0}
    assert cpu_split.local_tasks(cfg) == (3, 0)
    ps = {
        "cluster": {"worker": ["localhost:1"], "ps": ["localhost:2"]},
        "task": {"type": "ps", "index": 0},
    }
    assert cpu_split.local_tasks(ps) == (1, 0)


@pytest.mark.parametrize(
    "cpus, tasks, want",
    [
        (2, 2, [(0,), (1,)]),
        (8, 3, [(0, 1, 2), (3, 4, 5), (6, 7)]),
        (16, 4, [tuple(range(i * 4, i * 4 + 4)) for i in range(4)]),
    ],
)
def test_pin_pins_each_task_to_its_own_contiguous_slice(cpus, tasks, want):
    got = [cpu_split.plan("pin", list(range(cpus)), cpus, tasks, r, {}) for r in range(tasks)]
    assert [g.cpus for g in got] == want
    assert [g.intra_op for g in got] == [len(w) for w in want]
    assert [g.inter_op for g in got] == [max(2, len(w)) for w in want]
    assert sorted(c for g in got for c in g.cpus) == list(range(cpus))


def test_auto_sizes_pools_without_pinning():
    # Pinned tasks could not leave a core another process was using (the
    # benchmark's epoch spread; docs/benchmarks-appendix.md "Steadiness").
    for r in range(2):
        split = cpu_split.plan("auto", [0, 1], 2, 2, r, {})
        assert (split.cpus, split.intra_op, split.inter_op) == (None, 1, 2)
        assert "cpu_split=auto" in split.reason


def test_one_task_or_off_changes_nothing():
    for split in (
        cpu_split.plan("auto", [0, 1, 2, 3], 4, 1, 0, {}),
        cpu_split.plan("off", [0, 1, 2, 3], 4, 2, 1, {}),
        cpu_split.plan("auto", None, 4, 2, 1, {}),
    ):
        assert (split.cpus, split.intra_op, split.inter_op) == (None, None, None)


def test_more_tasks_than_cpus_or_restricted_affinity_only_sizes_pools():
    crowded = cpu_split.plan("pin", [0, 1], 2, 4, 3, {})
    assert (crowded.cpus, crowded.intra_op, crowded.inter_op) == (None, 1, 2)
    # Someone (taskset, SLURM --cpu-bind, a cpuset) already restricted us.
    bound = cpu_split.plan("pin", [4, 5, 6, 7], 16, 2, 0, {})
    assert (bound.cpus, bound.intra_op, bound.inter_op) == (None, 2, 2)
    assert "already restricted" in bound.reason
    threads = cpu_split.plan("threads", list(range(8)), 8, 2, 0, {})
    assert (threads.cpus, threads.intra_op, threads.inter_op) == (None, 4, 4)


def test_pool_sizes_the_user_set_are_kept():
    split = cpu_split.plan("pin", [0, 1], 2, 2, 0, {"TF_NUM_INTRAOP_THREADS": "2"})
    assert (split.cpus, split.intra_op, split.inter_op) == ((0,), None, 2)
    assert "TF_NUM_INTRAOP_THREADS" in split.reason


def test_bad_mode_is_a_named_error():
    with pytest.raises(ValueError, match=r"cpu_split.*'pinned'"):
        StrategyConfig(cpu_split="pinned")
    with pytest.raises(ValueError, match="cpu_split"):
        cpu_split.plan("pinned", [0, 1], 2, 2, 0, {})
    assert StrategyConfig.load(environ={"TFDIST_OPT_CPU_SPLIT": "off"}).cpu_split == "off"
