"""The tf.data builder on 2 virtual CPU replicas (conftest gives 4 devices).

Two input pipelines in one process are simulated with
`tf.distribute.InputContext`, exactly what MultiWorkerMirroredStrategy hands
each worker; tests/multiworker/test_data_sharding.py does it with real
workers.
"""

import os
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.data.records import parse_id
from tests.data.records import write_id_records
from tfdist_opt import data
from tfdist_opt.data import pipeline


def _ids(dataset):
    return [int(i) for batch in dataset for i in np.asarray(batch).reshape(-1)]


def _distributed_ids(strategy, dataset):
    seen, shapes = [], set()
    for batch in dataset:
        for local in strategy.experimental_local_results(batch):
            shapes.add(tuple(local.shape))
            seen += local.numpy().reshape(-1).tolist()
    return seen, shapes


def _ctx(i, n=2, replicas=None):
    return tf.distribute.InputContext(
        num_input_pipelines=n, input_pipeline_id=i, num_replicas_in_sync=replicas or n
    )


@pytest.mark.parametrize(
    "sizes,policy,expected",
    [
        ([6, 6, 6, 6], "auto", "FILE"),  # 4 files >= 2 workers
        ([12, 12], "file", "FILE"),
        ([24], "auto", "DATA"),  # 1 file < 2 workers
        ([8, 8, 8], "data", "DATA"),
    ],
)
def test_two_pipelines_union_is_dataset_without_duplicates(tmp_path, sizes, policy, expected):
    write_id_records(str(tmp_path), sizes)
    opts = data.PipelineOptions(shard_policy=policy, seed=0)
    per_worker = []
    for i in range(2):
        ds, plan = data.worker_dataset(
            str(tmp_path / "*.tfrecord"), _ctx(i), 4, map_fn=parse_id, options=opts
        )
        assert plan.policy == expected
        per_worker.append(_ids(ds))
    seen = per_worker[0] + per_worker[1]
    assert len(per_worker[0]) == len(per_worker[1])
    assert sorted(seen) == list(range(sum(sizes)))  # all, each exactly once


def test_even_steps_when_shard_sizes_differ(tmp_path):
    # FILE: worker 0 gets files of 7 + 2 = 9 examples, worker 1 gets 5.
    write_id_records(str(tmp_path), [7, 5, 2])
    pattern = str(tmp_path / "*.tfrecord")
    counts, plans = [], []
    for i in range(2):
        ds, plan = data.worker_dataset(pattern, _ctx(i), 4, map_fn=parse_id)
        counts.append(len(list(ds)))
        plans.append(plan)
        assert ds.cardinality() == plan.steps_per_epoch
    assert counts == [2, 2]  # 4 and 2 full batches of 2 -> both stop at 2
    assert plans[0].shard_sizes == (9, 5) and plans[0].examples_dropped == 6
    with pytest.raises(ValueError, match=r"workers would run \[4, 2\] steps"):
        data.worker_dataset(
            pattern, _ctx(0), 4, map_fn=parse_id, options=data.PipelineOptions(uneven="error")
        )


def test_too_few_files_for_file_policy_lists_files(tmp_path):
    write_id_records(str(tmp_path), [4])
    with pytest.raises(
        ValueError,
        match=r"1 file\(s\) for 2 workers \(worker 0:"
        r" \['.*part-00000.tfrecord'\]; worker 1: NO FILES\)",
    ):
        data.worker_dataset(
            str(tmp_path / "*.tfrecord"),
            _ctx(1),
            4,
            options=data.PipelineOptions(shard_policy="file"),
        )


def test_no_files_matched(tmp_path):
    with pytest.raises(ValueError, match="no files match"):
        data.worker_dataset(str(tmp_path / "*.nope"), _ctx(0), 2)


def test_two_replicas_per_replica_shapes_and_full_epoch(tmp_path, strategy):
    write_id_records(str(tmp_path), [10, 10, 12])
    inp = data.build_input(
        str(tmp_path / "*.tfrecord"),
        strategy,
        8,
        map_fn=parse_id,
        options=data.PipelineOptions(seed=1),
    )
    assert inp.steps_per_epoch == 4 and inp.dataset.cardinality == 4
    for _ in range(2):  # two epochs, each the whole dataset once
        seen, shapes = _distributed_ids(strategy, inp.dataset)
        assert shapes == {(4,)}
        assert sorted(seen) == list(range(32))


def test_arrays_on_two_replicas_drop_a_stated_tail(strategy):
    x = np.arange(21, dtype=np.int64)
    inp = data.build_input(x, strategy, 4, options=data.PipelineOptions(shuffle=False))
    seen, shapes = _distributed_ids(strategy, inp.dataset)
    assert shapes == {(2,)} and inp.steps_per_epoch == 5
    assert len(seen) == 20 == len(set(seen))
    assert inp.plans[0].examples_dropped == 1


def test_arrays_data_sharded_in_numpy_per_worker():
    x = np.arange(10, dtype=np.int64)
    got = [_ids(data.worker_dataset(x, _ctx(i), 4)[0]) for i in range(2)]
    assert len(got[0]) == len(got[1]) == 4  # 5 each -> 2 full batches of 2
    assert not set(got[0]) & set(got[1])
    assert all(i % 2 == 0 for i in got[0]) and all(i % 2 for i in got[1])


def test_indivisible_global_batch_fails_before_step_one(strategy):
    with pytest.raises(ValueError, match=r"global_batch_size=5, num_replicas=2"):
        data.build_dataset(np.zeros(8), strategy, 5)


def test_shuffle_is_seeded_and_reshuffled_each_epoch(tmp_path):
    write_id_records(str(tmp_path), [16, 16])
    pattern = str(tmp_path / "*.tfrecord")
    opts = data.PipelineOptions(seed=7)

    def epochs():
        ds, _ = data.worker_dataset(pattern, _ctx(0, 1, 1), 4, map_fn=parse_id, options=opts)
        return _ids(ds), _ids(ds)

    first, second = epochs()
    assert sorted(first) == sorted(second) == list(range(32))
    assert first != second  # reshuffled per epoch
    assert epochs() == (first, second)  # same seed, same sequence


def test_cache_memory_and_file(tmp_path):
    write_id_records(str(tmp_path), [6, 6])
    pattern = str(tmp_path / "*.tfrecord")
    calls = tf.Variable(0)

    def counting_parse(serialized):
        calls.assign_add(1)
        return parse_id(serialized)

    ds, _ = data.worker_dataset(
        pattern,
        _ctx(0, 1, 1),
        4,
        map_fn=counting_parse,
        options=data.PipelineOptions(cache="memory", seed=0),
    )
    a, b = _ids(ds), _ids(ds)
    assert sorted(a) == sorted(b) == list(range(12)) and a != b
    assert int(calls.numpy()) == 12  # parsed once, served from cache after
    prefix = str(tmp_path / "cache")
    ds, _ = data.worker_dataset(
        pattern, _ctx(0, 1, 1), 4, map_fn=parse_id, options=data.PipelineOptions(cache=prefix)
    )
    assert sorted(_ids(ds)) == list(range(12))
    assert any(f.startswith("cache_worker0") for f in os.listdir(tmp_path))


@pytest.mark.gpu
def test_dataset_options_applied(tmp_path):
    opts = data.PipelineOptions(
        private_threadpool_size=3, autotune_ram_budget=1 << 28, deterministic=False
    )
    ds, _ = data.worker_dataset(np.arange(8), _ctx(0, 1, 1), 2, options=opts)
    got = ds.options()
    assert got.experimental_distribute.auto_shard_policy == (
        tf.data.experimental.AutoShardPolicy.OFF
    )
    assert got.threading.private_threadpool_size == 3
    assert got.autotune.ram_budget == 1 << 28
    assert got.deterministic is False
    # Per-replica device prefetch: 2 batches where a GPU exists, else 1.
    has_gpu = bool(tf.config.list_physical_devices("GPU"))
    assert pipeline._input_options(data.PipelineOptions()).experimental_per_replica_buffer_size == (
        2 if has_gpu else 1
    )


@pytest.mark.gpu
@pytest.mark.parametrize("gpus", [[], ["/physical_device:GPU:0"]])
def test_device_prefetch_follows_the_gpu_list(monkeypatch, gpus):
    # Both branches on any host: the builder reads the device list here.
    real = tf.config.list_physical_devices
    monkeypatch.setattr(
        tf.config, "list_physical_devices", lambda kind=None: gpus if kind == "GPU" else real(kind)
    )
    assert pipeline._input_options(data.PipelineOptions()).experimental_per_replica_buffer_size == (
        2 if gpus else 1
    )
    assert (
        pipeline._input_options(
            data.PipelineOptions(device_prefetch=3)
        ).experimental_per_replica_buffer_size
        == 3
    )


def test_dataset_fn_source_is_per_worker_and_batched_for_us(strategy):
    contexts = []

    def dataset_fn(ctx):
        contexts.append(ctx)
        return tf.data.Dataset.range(12).shard(ctx.num_input_pipelines, ctx.input_pipeline_id)

    inp = data.build_input(
        data.DatasetFnSource(dataset_fn, examples_per_worker=12),
        strategy,
        4,
        options=data.PipelineOptions(seed=0),
    )
    assert contexts[0].num_replicas_in_sync == 2
    assert inp.plans[0].policy == "OFF" and inp.steps_per_epoch == 3
    seen, shapes = _distributed_ids(strategy, inp.dataset)
    assert shapes == {(2,)} and sorted(seen) == list(range(12))
    with pytest.raises(TypeError, match="expected a tf.data.Dataset"):
        data.build_dataset(lambda ctx: [1, 2], strategy, 2)


def test_fit_trains_on_two_replicas(tmp_path, strategy):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 3)).astype("float32")
    y = x @ np.array([[1.0], [-2.0], [0.5]], "float32")
    ds = data.build_dataset((x, y), strategy, 16, options=data.PipelineOptions(seed=0))
    with strategy.scope():
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        model.compile(keras.optimizers.SGD(0.1), "mse")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        history = model.fit(ds, epochs=3, verbose=0, shuffle=False)
    # TF reports per-replica batches as the cardinality (8 here); the builder
    # corrects it to steps (4), else Keras warns the input "ran out of data".
    assert ds.cardinality == 4
    assert not [w for w in caught if "ran out of data" in str(w.message)]
    losses = history.history["loss"]
    assert len(losses) == 3 and losses[-1] < losses[0]


def test_fit_on_tfrecords_with_map_and_augment(tmp_path, strategy):
    write_id_records(str(tmp_path), [16, 16])

    def to_xy(i):
        x = tf.cast(tf.stack([i, i]), tf.float32) / 32.0
        return x, tf.reduce_sum(x, keepdims=True)

    def augment(x, y):
        return x + tf.random.uniform([2], 0, 1e-3), y

    ds = data.build_dataset(
        str(tmp_path / "*.tfrecord"),
        strategy,
        8,
        map_fn=lambda s: to_xy(parse_id(s)),
        augment_fn=augment,
    )
    # Without augment_fn, x == (id, id) / 32 and y == x0 + x1 exactly; with
    # it, each coordinate carries its own noise in [0, 1e-3), after map_fn.
    noise = []
    for x, y in ds:
        for xl, yl in zip(
            strategy.experimental_local_results(x), strategy.experimental_local_results(y)
        ):
            noise.append(xl.numpy() - yl.numpy() / 2.0)
    noise = np.concatenate(noise)
    assert noise.shape == (32, 2)
    assert np.all(noise >= -1e-6) and np.all(noise < 1e-3 + 1e-6)
    assert np.count_nonzero(noise[:, 0] != noise[:, 1]) > 16  # applied
    with strategy.scope():
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        model.compile("sgd", "mse")
    assert len(model.fit(ds, epochs=2, verbose=0).history["loss"]) == 2


def test_fit_under_opt_strategy():
    import tfdist_opt

    strategy = tfdist_opt.opt_strategy(cpu_replicas=2)
    assert strategy.num_replicas_in_sync == 2
    x = np.ones((32, 2), "float32")
    inp = data.build_input((x, x[:, :1]), strategy, 8)
    assert inp.steps_per_epoch == 4
    with strategy.scope():
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        model.compile("sgd", "mse")
    history = model.fit(inp.dataset, epochs=2, verbose=0, shuffle=False)
    assert len(history.history["loss"]) == 2
