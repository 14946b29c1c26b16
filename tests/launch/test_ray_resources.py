"""`ray_resources`: room for the workers on a Ray cluster's nodes, or a named error."""

import pytest

from tfdist_opt.launch import ray_resources


def _node(address, alive=True, **resources):
    return {"NodeManagerAddress": address, "Alive": alive, "Resources": resources}


NODES = [
    _node("10.0.0.1", CPU=1.0, memory=1e9),
    _node("10.0.0.2", CPU=3.0, GPU=2.0),
    _node("10.0.0.3", alive=False, CPU=8.0),  # dead: holds nothing
]


def test_room_counts_whole_bundles_per_alive_node():
    assert ray_resources.room(NODES, {"CPU": 1}) == 4
    assert ray_resources.room(NODES, {"CPU": 2}) == 1  # 1 on a 3-CPU node, none on 1
    assert ray_resources.room(NODES, {"GPU": 1}) == 2
    assert ray_resources.room(NODES, {"GPU": 1, "CPU": 2}) == 1
    assert ray_resources.room([], {"CPU": 1}) == 0


def test_check_room_passes_when_min_workers_fit():
    ray_resources.check_room(NODES, 4, {"CPU": 1}, "4")
    ray_resources.check_room(NODES, 2, {"CPU": 1}, "2:8")  # MIN fits; MAX may wait
    ray_resources.check_room([], 3, {}, "3")  # asks nothing: nothing to check


def test_check_room_names_the_numbers():
    one_cpu = [_node("198.18.0.10", CPU=1.0)]
    with pytest.raises(ValueError) as e:
        ray_resources.check_room(one_cpu, 2, {"CPU": 1}, "2")
    assert str(e.value) == (
        "Invalid value for `-n`: 2 Ray worker(s) asking {CPU 1} each do not fit "
        "the Ray cluster: its nodes hold 1 (198.18.0.10: CPU 1; ray.nodes()). "
        "Received: -n 2. Expected at most 1 worker(s), or more nodes (`ray start "
        "--address=...`) or resources (`ray start --num-cpus` / `--num-gpus`)."
    )
    with pytest.raises(ValueError, match=r"asking \{GPU 2\}.*hold 1 .*10\.0\.0\.2: GPU 2"):
        ray_resources.check_room(NODES, 2, {"GPU": 2}, "2:3")
