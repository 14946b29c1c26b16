"""Who writes a directory: the evidence probe and the per-directory binding (issue 23)."""

import os
import threading
import types

import pytest

from tests.kv_fake import ThreadStore
from tfdist_opt.strategy.saving import file_writers
from tfdist_opt.strategy.saving import storage_sharing as ss


TASKS = ["worker_0", "worker_1", "worker_2"]


def test_groups_are_components_of_saw_and_the_first_task_writes():
    layout = ss.group(TASKS, {"worker_0": ["worker_1"], "worker_1": ["worker_0"], "worker_2": []})
    assert layout.groups == (("worker_0", "worker_1"), ("worker_2",))
    assert [layout.writer_of(t) for t in TASKS] == ["worker_0", "worker_0", "worker_2"]
    assert [layout.is_writer(t) for t in TASKS] == [True, False, True]
    # One-way sight (a client that has not yet seen a new file) still groups;
    # a task that never reported shares only what others saw of it.
    assert ss.group(TASKS, {"worker_2": ["worker_1"], "worker_0": None}).groups == (
        ("worker_0",),
        ("worker_1", "worker_2"),
    )
    # The chief rule is the special case "one group", chief first.
    chiefed = ["chief_0", "worker_0", "worker_1"]
    assert (
        ss.group(chiefed, {"worker_1": ["chief_0", "worker_0"]}).writer_of("worker_0") == "chief_0"
    )
    assert ss.shared_layout(chiefed).groups == (tuple(chiefed),)
    assert ss.private_layout(TASKS).groups == (("worker_0",), ("worker_1",), ("worker_2",))


def _run_probes(dirs, store, timeout_s=10.0, only=None):
    results = {}

    def worker(task):
        results[task] = ss.probe(dirs[task], task, TASKS, store, "ns/1", timeout_s=timeout_s)

    threads = [threading.Thread(target=worker, args=(t,)) for t in (only or TASKS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


def test_mixed_cluster_probe_agrees_everywhere_and_leaves_no_file(tmp_path):
    shared, own = tmp_path / "nfs", tmp_path / "local2"
    shared.mkdir()
    own.mkdir()
    # worker_2's directory does not exist yet: it probes the nearest ancestor
    # (where the directory will be created) and creates nothing.
    dirs = {
        "worker_0": str(shared / "ckpt"),
        "worker_1": str(shared / "ckpt"),
        "worker_2": str(own / "ckpt" / "deeper"),
    }
    results = _run_probes(dirs, ThreadStore())
    layouts = {layout for layout, missing in results.values()}
    assert len(layouts) == 1 and all(not m for _, m in results.values())
    assert layouts.pop().groups == (("worker_0", "worker_1"), ("worker_2",))
    assert os.listdir(shared) == [] and os.listdir(own) == []


def test_probe_names_a_worker_that_never_comes(tmp_path):
    results = _run_probes(
        {t: str(tmp_path) for t in TASKS},
        ThreadStore(),
        timeout_s=1.0,
        only=["worker_0", "worker_1"],
    )
    for layout, missing in results.values():
        assert missing == ["worker_2"]
        assert layout.groups == (("worker_0", "worker_1"), ("worker_2",))
    assert os.listdir(tmp_path) == []


def test_unwritable_directory_shares_by_what_it_sees(tmp_path, monkeypatch):
    """A worker that cannot create a token (read-only mount of the shared
    storage) still sees the others' tokens and joins their group."""
    real_create = ss.Files.create
    monkeypatch.setattr(
        ss.Files,
        "create",
        lambda self, d: None if threading.current_thread().name == "ro" else real_create(self, d),
    )
    store = ThreadStore()
    results = {}

    def worker(task):
        results[task] = ss.probe(str(tmp_path), task, TASKS[:2], store, "ns/2")[0]

    threads = [
        threading.Thread(target=worker, args=("worker_0",)),
        threading.Thread(target=worker, args=("worker_1",), name="ro"),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results["worker_0"] == results["worker_1"]
    assert results["worker_1"].writer_of("worker_1") == "worker_0"


class _Strategy(types.SimpleNamespace):
    """A stand-in strategy; weakly referenceable and hashed by identity, as a
    real one is (tfdist_opt keeps its state in `runtime.runtime_of`)."""

    __hash__ = object.__hash__
    __eq__ = object.__eq__


# ------------------------------------------------------- the binding
def _strategy(task_id, mode="auto", n=2):
    spec = types.SimpleNamespace(as_dict=lambda: {"worker": [f"localhost:{i}" for i in range(n)]})
    strategy = _Strategy(
        cluster_resolver=types.SimpleNamespace(
            task_type="worker", task_id=task_id, cluster_spec=lambda: spec
        )
    )
    file_writers.attach(strategy, mode)
    return strategy


@pytest.fixture
def store(monkeypatch):
    file_writers.reset_for_tests()
    fake = ThreadStore()
    monkeypatch.setattr(file_writers, "_STORE", [fake])
    yield fake
    file_writers.reset_for_tests()


def test_overrides_decide_without_a_probe(store, tmp_path):
    assert file_writers.is_writer(_strategy(1, "per_worker"), str(tmp_path))
    assert not file_writers.is_writer(_strategy(1, "shared"), str(tmp_path))
    assert file_writers.is_writer(_strategy(0, "shared"), str(tmp_path))
    assert not file_writers.is_writer(_strategy(1), "gs://bucket/ckpt")  # object storage
    assert store.values == {}
    with pytest.raises(
        ValueError,
        match=r"Invalid value for `storage_sharing`: "
        r"expected one of .*Received: storage_sharing='nfs'",
    ):
        file_writers.attach(_Strategy(), "nfs")


def test_one_probe_per_directory_then_cached(store, tmp_path):
    """worker_0 decides through the binding; worker_1's side of the probe
    runs in a thread (the same namespace: the job's first decision)."""
    peer = threading.Thread(
        target=lambda: ss.probe(
            str(tmp_path / "ckpt"),
            "worker_1",
            ["worker_0", "worker_1"],
            store,
            "tfdist_opt/storage/probe/1",
        )
    )
    peer.start()
    assert file_writers.is_writer(_strategy(0), str(tmp_path / "ckpt"))
    peer.join(30)
    keys = len(store.values)
    assert keys == 4  # token + seen, per worker
    found = file_writers.decide(_strategy(0), str(tmp_path / "ckpt"))
    assert found.layout.groups == (("worker_0", "worker_1"),) and found.writes
    assert len(store.values) == keys  # cached: no second probe
    assert os.listdir(tmp_path) == []


def test_non_writer_waits_for_its_writer_and_raises_its_error(store, tmp_path):
    shared = str(tmp_path)
    with file_writers._LOCK:  # both share `shared` (as a probe found)
        file_writers._CACHE[("auto", shared)] = ss.shared_layout(["worker_0", "worker_1"])
    events = []

    def non_writer():
        try:
            with file_writers.write_scope(_strategy(1), shared, barrier=True) as tmp:
                events.append(("scratch", tmp is not None and tmp != shared))
            events.append("returned")
        except OSError as e:
            events.append(str(e))

    t = threading.Thread(target=non_writer)
    t.start()
    t.join(0.3)
    assert t.is_alive() and events == [("scratch", True)]  # waiting for worker_0
    file_writers._SEQ["saved"] = 0  # worker_0 is another process: its 1st save
    with file_writers.write_scope(_strategy(0), shared, barrier=True) as tmp:
        assert tmp is None  # the writer writes
    t.join(10)
    assert events[-1] == "returned"

    file_writers._SEQ["saved"] = 1  # both at their 2nd save
    t = threading.Thread(target=non_writer)
    t.start()
    t.join(0.2)
    file_writers._SEQ["saved"] = 1
    with pytest.raises(RuntimeError):
        with file_writers.write_scope(_strategy(0), shared, barrier=True):
            raise RuntimeError("disk full")
    t.join(10)
    assert "worker_0, which writes" in events[-1] and "disk full" in events[-1]


def test_storage_sharing_field_from_every_source_and_bad_value(tmp_path):
    from tfdist_opt.strategy.config import StrategyConfig

    assert StrategyConfig().storage_sharing == "auto"
    assert (
        StrategyConfig.load(environ={"TFDIST_OPT_STORAGE_SHARING": "per_worker"}).storage_sharing
        == "per_worker"
    )
    path = tmp_path / "c.json"
    path.write_text('{"strategy": {"storage_sharing": "shared"}}')
    assert StrategyConfig.load(path, environ={}).storage_sharing == "shared"
    with pytest.raises(
        ValueError,
        match=r"Invalid value for `storage_sharing`: "
        r"expected one of 'auto', 'shared', 'per_worker'\. "
        r"Received: storage_sharing='nfs'",
    ):
        StrategyConfig(storage_sharing="nfs")
