"""Sharding arithmetic and policy decisions: pure, no TensorFlow."""

import sys

import pytest

from tfdist_opt.data import sharding


def test_module_does_not_import_tensorflow():
    assert "tfdist_opt.data.sharding" in sys.modules
    # The pure core stays importable in processes that never start TF.
    import tfdist_opt.data.options  # noqa: F401 (for the name below)
    import tfdist_opt.data.sources  # noqa: F401

    for module in (sharding, tfdist_opt.data.options, tfdist_opt.data.sources):
        with open(module.__file__) as f:
            assert "import tensorflow" not in f.read()


@pytest.mark.parametrize(
    "global_batch,replicas,expected", [(64, 4, 16), (8, 8, 1), (6, 2, 3), (5, 1, 5)]
)
def test_per_replica_batch(global_batch, replicas, expected):
    assert sharding.per_replica_batch_size(global_batch, replicas) == expected


def test_indivisible_global_batch_names_both_numbers():
    with pytest.raises(
        ValueError,
        match=r"global_batch_size=10, "
        r"num_replicas=4.*8 or 12",
    ):
        sharding.per_replica_batch_size(10, 4)
    with pytest.raises(
        ValueError,
        match=r"global_batch_size=3, num_replicas=4"
        r".*Use e.g. 4\.",
    ):
        sharding.per_replica_batch_size(3, 4)


@pytest.mark.parametrize("value", [0, -2, 2.0, True, "8"])
def test_bad_batch_type(value):
    with pytest.raises(ValueError, match="global_batch_size"):
        sharding.per_replica_batch_size(value, 2)


def test_files_per_worker_round_robin_like_tf_file_policy():
    assert sharding.files_per_worker(list("abcde"), 2) == [["a", "c", "e"], ["b", "d"]]
    assert sharding.files_per_worker(["a"], 3) == [["a"], [], []]


def test_shard_sizes():
    assert sharding.data_shard_sizes(10, 3) == [4, 3, 3]
    assert sharding.data_shard_sizes(2, 4) == [1, 1, 0, 0]
    assert sharding.file_shard_sizes([5, 5, 2], 2) == [7, 5]


def test_policy_file_when_enough_files():
    assert sharding.choose_policy(4, 2)[0] == sharding.FILE
    assert sharding.choose_policy(2, 2, "file")[0] == sharding.FILE


def test_policy_data_when_too_few_files_or_no_files():
    policy, reason = sharding.choose_policy(1, 2)
    assert policy == sharding.DATA and "1 file(s) < 2 workers" in reason
    assert sharding.choose_policy(None, 2)[0] == sharding.DATA
    assert sharding.choose_policy(8, 2, "data")[0] == sharding.DATA


def test_policy_off_for_one_worker_and_per_worker_sources():
    assert sharding.choose_policy(3, 1)[0] == sharding.OFF
    assert sharding.choose_policy(None, 4, per_worker=True)[0] == sharding.OFF


def test_file_demanded_with_too_few_files_lists_files_per_worker():
    with pytest.raises(
        ValueError,
        match=r"3 file\(s\) for 4 workers \(worker "
        r"0: \['a'\]; worker 1: \['b'\]; worker 2: \['c'\]; "
        r"worker 3: NO FILES\)",
    ):
        sharding.choose_policy(3, 4, "file", files=["a", "b", "c"])


def test_invalid_requests():
    with pytest.raises(ValueError, match=r"shard_policy='bogus'"):
        sharding.choose_policy(3, 2, "bogus")
    with pytest.raises(ValueError, match="in-memory source"):
        sharding.choose_policy(None, 2, "file")
    with pytest.raises(ValueError, match="whole dataset"):
        sharding.choose_policy(4, 2, "off")
    with pytest.raises(ValueError, match="already per-worker"):
        sharding.choose_policy(None, 2, "data", per_worker=True)


def test_steps_per_epoch_even_when_shards_differ():
    # 7 and 5 examples, batch 2: 3 and 2 full batches -> both run 2.
    assert sharding.steps_per_epoch([7, 5], 2) == 2
    # Several local replicas: one step consumes local_replicas batches.
    assert sharding.steps_per_epoch([16], 2, local_replicas=2) == 4
    assert sharding.steps_per_epoch([8, 8], 4, uneven="error") == 2


def test_uneven_error_names_step_counts():
    with pytest.raises(
        ValueError,
        match=r"\[3, 2\] steps per epoch.*"
        r"uneven='drop' to run 2 steps",
    ):
        sharding.steps_per_epoch([7, 5], 2, uneven="error")


def test_no_full_step_is_an_error():
    with pytest.raises(ValueError, match=r"examples per worker \[5, 1\]"):
        sharding.steps_per_epoch([5, 1], 2)


def test_plan_file_counts_and_drops_the_tail():
    plan = sharding.plan_shards(
        num_workers=2,
        worker_index=1,
        num_replicas=2,
        global_batch_size=4,
        files=["a", "b", "c"],
        examples_per_file=[5, 5, 2],
    )
    assert plan.policy == sharding.FILE
    assert plan.files == ("b",)
    assert plan.shard_sizes == (7, 5)
    assert plan.steps_per_epoch == 2
    assert plan.examples_kept == 4
    assert plan.examples_dropped == 4
    assert "4 example(s) dropped" in plan.describe()


def test_plan_data_for_too_few_files_keeps_all_files():
    plan = sharding.plan_shards(
        num_workers=2,
        worker_index=0,
        num_replicas=4,
        global_batch_size=8,
        files=["a"],
        examples_per_file=[20],
    )
    assert plan.policy == sharding.DATA
    assert plan.files == ("a",)
    assert plan.local_replicas == 2 and plan.per_replica_batch == 2
    assert plan.shard_sizes == (10, 10)
    assert plan.steps_per_epoch == 2
    assert plan.examples_dropped == 4


def test_plan_arrays_and_per_worker_sources():
    plan = sharding.plan_shards(
        num_workers=1, worker_index=0, num_replicas=2, global_batch_size=4, num_examples=10
    )
    assert (plan.policy, plan.shard_sizes, plan.steps_per_epoch) == (sharding.OFF, (10,), 2)
    plan = sharding.plan_shards(
        num_workers=2, worker_index=0, num_replicas=2, global_batch_size=4, per_worker=True
    )
    assert plan.policy == sharding.OFF and plan.steps_per_epoch is None
    plan = sharding.plan_shards(
        num_workers=2,
        worker_index=0,
        num_replicas=2,
        global_batch_size=4,
        per_worker=True,
        examples_per_worker=9,
    )
    assert plan.steps_per_epoch == 4


def test_plan_rejects_bad_inputs():
    with pytest.raises(ValueError, match="matched no files"):
        sharding.plan_shards(
            num_workers=1, worker_index=0, num_replicas=1, global_batch_size=1, files=[]
        )
    with pytest.raises(ValueError, match="worker_index=2"):
        sharding.plan_shards(
            num_workers=2, worker_index=2, num_replicas=2, global_batch_size=2, num_examples=4
        )
    with pytest.raises(ValueError, match="one count per file"):
        sharding.plan_shards(
            num_workers=1,
            worker_index=0,
            num_replicas=1,
            global_batch_size=1,
            files=["a", "b"],
            examples_per_file=[1],
        )


def test_shuffle_buffer_rule():
    assert sharding.shuffle_buffer_size(500, 32) == 500  # whole small shard
    assert sharding.shuffle_buffer_size(10**6, 32) == 10_000  # capped
    assert sharding.shuffle_buffer_size(10**6, 1024) == 16 * 1024  # >= 16 batches
    assert sharding.shuffle_buffer_size(None, 8) == 10_000
    # File sources: bounded, since the buffer refills at every epoch start.
    assert sharding.shuffle_buffer_size(4096, 64, streaming=True) == 1024
    assert sharding.shuffle_buffer_size(500, 64, streaming=True) == 500
    assert sharding.shuffle_buffer_size(10**6, 256, streaming=True) == 2048
    assert sharding.shuffle_buffer_size(10**6, 4096, streaming=True) == 10_000
