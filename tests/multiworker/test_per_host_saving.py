"""The Keras guide's saving code on shared storage and on per-host disks (issue 23).

The same script (`scripts/guide_saving.py`, relative paths only) runs with
both workers in one directory and with each worker in its own (as hosts with
local disks): a crash after epoch 2, then a restart. On both layouts every
worker restores the same checkpoint (`make_or_restore_model`), resumes at
epoch 2 from Keras's own `BackupAndRestore`, ends at the uninterrupted
single-process weights, and reads back what it saved (`load_weights` of the
newest ModelCheckpoint file, `load_model` right after `save`). Shared: one
copy of each file; per host: each host keeps a complete copy.
"""

import json
import os

import numpy as np
import pytest

from tests.multiworker import harness

SCRIPT = "tests/multiworker/scripts/guide_saving.py"
FILES = {"backup", "ckpt", "m.keras", "weights"}


def _run(shared, hosts, mode, tmp, expect_rc):
    results = harness.run_workers(
        2, [SCRIPT, shared, hosts, mode], timeout_s=150, extra_env={"TMPDIR": str(tmp)}
    )
    got = {}
    for r in results:
        assert r.returncode == expect_rc, r.output[-3000:]
        for line in r.output.splitlines():
            if line.startswith("RESULT "):
                label, payload = line[len("RESULT ") :].split(" ", 1)
                got[(label, r.index)] = json.loads(payload)
    return got


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One crash run and one restart, both layouts in each (2 clusters in all)."""
    root = tmp_path_factory.mktemp("guide_saving")
    tmp = root / "tmp"
    tmp.mkdir()
    args = (str(root / "shared"), str(root / "host{task}"))
    crashed = _run(*args, "crash", tmp, 3)
    after_crash = {
        i: (
            sorted(os.listdir(root / f"host{i}" / "ckpt")),
            json.loads((root / f"host{i}" / "backup" / "training_metadata.json").read_text()),
        )
        for i in (0, 1)
    }
    resumed = _run(*args, "resume", tmp, 0)
    return root, crashed, after_crash, resumed


def _listing(d):
    return {
        os.path.relpath(os.path.join(root, f), d) for root, _, files in os.walk(d) for f in files
    }


def _check(res, restored, start_epoch, epochs):
    assert res["restored"] == restored  # make_or_restore_model
    assert res["start_epoch"] == start_epoch  # Keras's BackupAndRestore
    np.testing.assert_allclose(res["w"], harness.sgd_reference(epochs), rtol=1e-5, atol=1e-6)
    assert res["newest_weights"] == "w-4.weights.h5"
    np.testing.assert_allclose(res["w_loaded_weights"], res["w"], rtol=1e-6)
    np.testing.assert_allclose(res["w_load_model"], res["w"], rtol=1e-6)


@pytest.mark.multiworker
@pytest.mark.slow
def test_per_host_disks_each_keep_a_copy_and_a_restart_resumes(runs):
    root, crashed, after_crash, resumed = runs
    for i in (0, 1):  # at the crash: each host has its own epochs 1-2
        assert after_crash[i][0] == ["ckpt-1.keras", "ckpt-2.keras"]
        assert after_crash[i][1]["epoch"] == 2
        # Restart: both restore ckpt-2, resume at epoch 2, end at the math.
        _check(resumed[("host", i)], "ckpt-2.keras", 2, 4)
        assert resumed[("host", i)]["scratch"] == []  # each wrote its own disk
        host = root / f"host{i}"
        assert set(os.listdir(host)) == FILES - {"backup"}  # deleted at the end
        assert sorted(os.listdir(host / "ckpt")) == [f"ckpt-{e}.keras" for e in range(1, 5)]
        assert not [f for f in _listing(host) if ".tfdist_opt_probe_" in f]
    assert ("host", 0) not in crashed


@pytest.mark.multiworker
@pytest.mark.slow
def test_shared_storage_one_copy_and_every_worker_reads_it_back(runs):
    root, crashed, _, resumed = runs
    shared = root / "shared"
    for i in (0, 1):
        _check(crashed[("shared", i)], None, 0, 4)  # a new model
        _check(resumed[("shared", i)], "ckpt-4.keras", 0, 8)  # restored, 4 more
    # The writer, named: worker 0 saved nothing elsewhere; each save of
    # worker 1 (per epoch a .keras file and weights, then m.keras) went into
    # its own temporary directory, in both runs.
    expected = [
        [f"ckpt/{name}-{e}.{ext}"]
        for e in range(1, 5)
        for name, ext in (("ckpt", "keras"), ("w", "weights.h5"))
    ] + [["m.keras"]]
    for run in (crashed, resumed):
        assert run[("shared", 0)]["scratch"] == []
        scratch = run[("shared", 1)]["scratch"]
        assert [sorted(e["files"]) for e in scratch] == expected
        assert all(os.path.dirname(e["dir"]) == str(root / "tmp") for e in scratch)
    assert set(os.listdir(shared)) == FILES - {"backup"}
    assert sorted(os.listdir(shared / "ckpt")) == [f"ckpt-{e}.keras" for e in range(1, 5)]
    assert sorted(os.listdir(shared / "weights")) == [f"w-{e}.weights.h5" for e in range(1, 5)]
    assert not [f for f in _listing(shared) if ".tfdist_opt_probe_" in f]
    assert os.listdir(root / "tmp") == []  # the non-writer's temporary copies are gone
