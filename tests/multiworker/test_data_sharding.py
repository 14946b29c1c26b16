"""Input sharding on 2 real workers (MultiWorkerMirroredStrategy, loopback).

Each worker builds the pipeline under `opt_strategy()` and records the ids
it saw; together, per epoch, they must be the dataset with no duplicates,
for FILE (4 files) and for DATA (1 file), and with uneven files both must
run the same number of steps (and `fit` must finish rather than hang).
The three cases run one after another in the workers of one cluster (one
cluster start for the module); each test reads its own case's files and
log lines.
"""

import json
import os

import pytest

from tests.data.records import write_id_records
from tests.multiworker.harness import run_workers

SCRIPT = os.path.join(os.path.dirname(__file__), "scripts", "data_shard_worker.py")
CASES = {  # name: (file sizes, policy, global batch)
    "auto_file": ([8, 8, 8, 8], "auto", 4),
    "auto_data": ([32], "auto", 4),
    "uneven_file": ([9, 5, 3], "file", 4),
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    root = tmp_path_factory.mktemp("data_sharding")
    cases = []
    for name, (sizes, policy, global_batch) in CASES.items():
        data_dir = root / "data" / name
        data_dir.mkdir(parents=True)
        write_id_records(str(data_dir), sizes)
        cases.append(
            {
                "name": name,
                "pattern": str(data_dir / "*.tfrecord"),
                "policy": policy,
                "global_batch": global_batch,
            }
        )
    out_root = root / "out"
    results = run_workers(
        2,
        [SCRIPT, str(out_root), json.dumps(cases)],
        timeout_s=150,
        # C++ warnings on, so TF's auto-shard warning would show.
        extra_env={"TF_CPP_MIN_LOG_LEVEL": "0"},
    )
    return out_root, results


def _case(cluster, name):
    out_root, results = cluster
    for r in results:
        assert r.returncode == 0, f"worker {r.index} failed:\n{r.output[-4000:]}"
    reports = [json.loads((out_root / name / f"worker{i}.json").read_text()) for i in range(2)]
    for report in reports:
        assert "error" not in report, report["error"]
    # Our decision is logged once per worker and case (both builds share the
    # plan). The datasets carry AutoShardPolicy.OFF (tests/data/test_pipeline.py),
    # so TF does not auto-shard; the second check guards against its grappler
    # message ("AUTO sharding policy will apply ...") should one appear.
    for r, report in zip(results, reports):
        log = r.output.split(f"CASE {name}\n", 1)[1].split("\nCASE ", 1)[0]
        assert log.count(f"sharding {report['policy']} over 2 worker(s)") == 1, log
        assert "sharding policy" not in log.lower(), log
    return reports


@pytest.mark.multiworker
@pytest.mark.parametrize("name,expected", [("auto_file", "FILE"), ("auto_data", "DATA")])
def test_union_is_dataset_without_duplicates(cluster, name, expected):
    reports = _case(cluster, name)
    for r in reports:
        assert r["policy"] == expected and r["fit_epochs"] == 1
    assert reports[0]["steps"] == reports[1]["steps"] == 8
    for epoch in range(2):
        a, b = reports[0]["epochs"][epoch], reports[1]["epochs"][epoch]
        assert len(a) == len(b) == 16
        assert sorted(a + b) == list(range(32))  # all, each exactly once


@pytest.mark.multiworker
def test_even_steps_with_uneven_files(cluster):
    # FILE: worker 0 reads files 0 and 2 (9 + 3 = 12), worker 1 file 1 (5).
    reports = _case(cluster, "uneven_file")
    assert reports[0]["shard_sizes"] == [12, 5]
    assert reports[0]["steps"] == reports[1]["steps"] == 2
    for epoch in range(2):
        a, b = reports[0]["epochs"][epoch], reports[1]["epochs"][epoch]
        assert len(a) == len(b) == 4  # 2 steps x per-replica batch 2
        assert not set(a) & set(b)
    assert all(r["fit_epochs"] == 1 for r in reports)
