"""Input sharding on 2 real workers (MultiWorkerMirroredStrategy, loopback).

Each worker builds the pipeline under `opt_strategy()` and records the ids
it saw; together, per epoch, they must be the dataset with no duplicates,
for FILE (4 files) and for DATA (1 file), and with uneven files both must
run the same number of steps (and `fit` must finish rather than hang).
"""

import json
import os

import pytest

from tests.data.records import write_id_records
from tests.multiworker.harness import run_workers

SCRIPT = os.path.join(os.path.dirname(__file__), "scripts",
                      "data_shard_worker.py")


def _run(tmp_path, sizes, policy, global_batch=4):
    data_dir, out_dir = tmp_path / "data", tmp_path / "out"
    data_dir.mkdir()
    out_dir.mkdir()
    write_id_records(str(data_dir), sizes)
    results = run_workers(2, [SCRIPT, str(out_dir), str(data_dir / "*.tfrecord"),
                              policy, str(global_batch)], timeout_s=150,
                          # C++ warnings on, so TF's auto-shard warning would show.
                          extra_env={"TF_CPP_MIN_LOG_LEVEL": "0"})
    for r in results:
        assert r.returncode == 0, f"worker {r.index} failed:\n{r.output[-4000:]}"
    reports = [json.loads((out_dir / f"worker{i}.json").read_text())
               for i in range(2)]
    # Our decision is logged once per worker (both builds share the plan).
    # The datasets carry AutoShardPolicy.OFF (tests/data/test_pipeline.py),
    # so TF does not auto-shard; the second check guards against its grappler
    # message ("AUTO sharding policy will apply ...") should one appear.
    for r, report in zip(results, reports):
        assert r.output.count(f"sharding {report['policy']} over 2 worker(s)") == 1
        assert "sharding policy" not in r.output.lower()
    return reports


@pytest.mark.multiworker
@pytest.mark.parametrize("sizes,policy,expected", [
    ([8, 8, 8, 8], "auto", "FILE"),
    ([32], "auto", "DATA"),
])
def test_union_is_dataset_without_duplicates(tmp_path, sizes, policy, expected):
    reports = _run(tmp_path, sizes, policy)
    for r in reports:
        assert r["policy"] == expected and r["fit_epochs"] == 1
    assert reports[0]["steps"] == reports[1]["steps"] == 8
    for epoch in range(2):
        a, b = reports[0]["epochs"][epoch], reports[1]["epochs"][epoch]
        assert len(a) == len(b) == 16
        assert sorted(a + b) == list(range(32))  # all, each exactly once


@pytest.mark.multiworker
def test_even_steps_with_uneven_files(tmp_path):
    # FILE: worker 0 reads files 0 and 2 (9 + 3 = 12), worker 1 file 1 (5).
    reports = _run(tmp_path, [9, 5, 3], "file", global_batch=4)
    assert reports[0]["shard_sizes"] == [12, 5]
    assert reports[0]["steps"] == reports[1]["steps"] == 2
    for epoch in range(2):
        a, b = reports[0]["epochs"][epoch], reports[1]["epochs"][epoch]
        assert len(a) == len(b) == 4  # 2 steps x per-replica batch 2
        assert not set(a) & set(b)
    assert all(r["fit_epochs"] == 1 for r in reports)
