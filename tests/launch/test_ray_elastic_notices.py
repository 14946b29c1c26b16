"""`ray_elastic.settle_lost_nodes` on a node that does not answer (a silent cut).

A raylet behind a cut link neither accepts nor refuses: its connect times
out. Such a node counts as lost like one that refuses, the restart waits for
Ray's verdict, and the launcher's output says so (`notify`, printed as
`[launch]` lines). Ray is faked (`ray.nodes()`); the silent raylet is a
listening socket whose accept queue is full, so the kernel drops further
connects.
"""

import socket
import time

import pytest

pytest.importorskip("ray.train")

from tfdist_opt.launch import ray_elastic  # pylint: disable=g-import-not-at-top


@pytest.fixture
def silent_port():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    held = []
    try:
        for _ in range(8):  # fill the accept queue: later SYNs are dropped
            c = socket.socket()
            c.setblocking(False)
            c.connect_ex(("127.0.0.1", port))
            held.append(c)
        time.sleep(0.2)
        probe = socket.socket()
        probe.settimeout(0.5)
        try:
            probe.connect(("127.0.0.1", port))
            pytest.skip("this kernel accepted past a full backlog: no silent port")
        except socket.timeout:
            pass
        finally:
            probe.close()
        yield port
    finally:
        for c in held:
            c.close()
        server.close()


def _node(node_id, port, alive=True):
    return {
        "NodeID": node_id,
        "Alive": alive,
        "NodeManagerAddress": "127.0.0.1",
        "NodeManagerPort": port,
    }


def test_a_silent_node_is_waited_for_and_named(monkeypatch, silent_port):
    calls, lines = [], []

    def nodes():
        calls.append(1)
        return [_node("s" * 16, silent_port, alive=len(calls) < 3)]

    monkeypatch.setattr(ray_elastic.ray, "nodes", nodes)
    monkeypatch.setattr(ray_elastic, "refresh_elastic_view", lambda: None)
    t0 = time.monotonic()
    lost = ray_elastic.settle_lost_nodes(wait_s=30, probe_s=0.5, notify=lines.append)
    assert lost == ["s" * 16]
    assert time.monotonic() - t0 < 10  # the probe's deadline, then Ray's verdict
    assert lines[0] == (
        "Ray node(s) 127.0.0.1 (ssssssss) do not answer: the restart waits until "
        "Ray declares them dead (at most 30 s; Ray's health check decides: "
        "RAY_health_check_* on `ray start --head`)"
    )
    assert lines[1].startswith("Ray declared node(s) 127.0.0.1 (ssssssss) dead after ")
    assert lines[1].endswith(" s: the group restarts on the nodes left"), lines
    assert len(lines) == 2


def test_a_node_ray_keeps_alive_past_wait_s_is_named_too(monkeypatch, silent_port):
    lines = []
    monkeypatch.setattr(ray_elastic.ray, "nodes", lambda: [_node("t" * 16, silent_port)])
    monkeypatch.setattr(ray_elastic, "refresh_elastic_view", lambda: None)
    assert ray_elastic.settle_lost_nodes(wait_s=0.3, probe_s=0.5, notify=lines.append) == ["t" * 16]
    assert lines[1].startswith("Ray still lists node(s) 127.0.0.1 (tttttttt) alive after ")
    assert lines[1].endswith(
        " s: the group restarts anyway (Ray may wait for a placement there)"
    ), lines


def test_a_node_ray_declared_dead_before_the_restart_is_named(monkeypatch):
    # With short health checks on the head, Ray's verdict can come before
    # the workers' failure: nothing to wait for, but the node is named.
    live = {"NodeID": "a" * 16, "Alive": True, "NodeManagerAddress": "10.0.0.1"}
    dead = {"NodeID": "d" * 16, "Alive": False, "NodeManagerAddress": "10.0.0.2"}
    monkeypatch.setattr(ray_elastic.ray, "nodes", lambda: [live, dead])
    refreshed, lines = [], []
    monkeypatch.setattr(ray_elastic, "refresh_elastic_view", lambda: refreshed.append(1))
    known = {"a" * 16: "10.0.0.1 (aaaaaaaa)", "d" * 16: "10.0.0.2 (dddddddd)"}
    assert ray_elastic.settle_lost_nodes(wait_s=30, notify=lines.append, known=known) == ["d" * 16]
    assert lines == [
        "Ray declared node(s) 10.0.0.2 (dddddddd) dead: the group restarts on the nodes left"
    ]
    assert refreshed == [1]
