"""Elastic restarts after a lost Ray node, sized from the nodes still alive.

Ray Train V2 sizes the restart of a failed elastic group
(`ScalingConfig(num_workers=(MIN, MAX))`) the moment the failure reaches
its controller, from what its elastic policy knows of the nodes then. When
a node dies that moment comes within a second or two: the controller's own
health check of the worker actors (every 2 s) finds the dead one, or a
peer's next collective fails. But Ray declares the node dead only after its
raylet misses health checks (~15 s by default), and the policy's view of
the nodes, Ray's `AutoscalingCoordinator` actor, re-reads the node table
only every 20 s. Sized from that stale view the group restarts at the old
size, waits out `RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S` (60 s) for a
bundle no node can hold, and only then shrinks.

`LostNodeCallback`, a Ray Train controller callback that `tfdist-opt launch
--ray -n MIN:MAX` installs, holds each restart (a RETRY decision) until
every node whose raylet refuses connections is declared dead, then makes
the coordinator re-read the nodes: the restart is sized from the nodes
alive. While a group runs it has the coordinator re-read the nodes every
resize interval (at most 20 s), so a node that joins is seen at Ray's next
resize check. Measured on two 1-CPU nodes
(tests/multiworker/test_ray_elastic.py, `--ray-resize-interval 3`): node
removed -> training on 1 worker in 10 s (67-73 s without: Ray first asked
for 2 workers and waited the 60 s out); node back -> 2 workers in 14 s
(19-30 s without).

A trainer built by hand (`TensorflowTrainer` with
`tfdist_opt.launch.ray_backend.TensorflowConfig`) gets the same with
`RunConfig(callbacks=[LostNodeCallback()])`.

This module imports Ray; import it only where Ray is installed
(`pip install tfdist_opt[ray]`).
"""

from __future__ import annotations

import logging
import socket
import threading
import time

import ray

# A DeveloperAPI that Ray keeps under _internal (see tfdist_opt.private_api).
from ray.train.v2._internal.execution.callback import ControllerCallback

# Ray Train V2's autoscaling coordinator: its actor name and namespace (see
# tfdist_opt.private_api).
_COORDINATOR_NAME = "AutoscalingCoordinator"

_log = logging.getLogger(__name__)


class LostNodeCallback(ControllerCallback):
    """Holds an elastic restart until Ray has declared lost nodes dead.

    It also refreshes the elastic view every `refresh_s` while the group
    runs, so a node that joins is seen at the group's next resize check
    (`ScalingConfig(elastic_resize_monitor_interval_s)`), not up to 20 s
    later.

    Args:
        wait_s: float. Longest wait for Ray to declare a lost node dead.
            Defaults to 60 (Ray's default verdict comes in ~15-30 s).
        refresh_s: float. Seconds between refreshes while the group runs;
            at most Ray's own 20 s. Defaults to 20.

    Example:
        >>> import ray.train  # doctest: +SKIP
        >>> run_config = ray.train.RunConfig(callbacks=[LostNodeCallback()])
    """

    def __init__(self, wait_s: float = 60.0, refresh_s: float = 20.0):
        self.wait_s = wait_s
        self.refresh_s = min(float(refresh_s), 20.0)
        # Set in the controller's process at its first update, not here:
        # this object is built in the driver, whose clock (on another host)
        # does not compare.
        self._refreshed = None

    def after_controller_state_update(self, previous_state, current_state):
        # Called after every controller loop iteration (each poll of the
        # workers); only a running group is checked for room to grow.
        del previous_state
        if type(current_state).__name__ != "RunningState":
            return
        now = time.monotonic()
        if self._refreshed is None:
            self._refreshed = now
        if now - self._refreshed < self.refresh_s:
            return
        self._refreshed = now
        try:
            _recompute()  # not waited on: the controller's loop goes on
        except Exception:  # pylint: disable=broad-except
            pass  # no coordinator (yet): Ray's own 20 s tick

    def before_controller_execute_failure_decision(self, failure_decision):
        if getattr(failure_decision, "name", None) != "RETRY":
            return  # RAISE ends the run: no restart to size
        # Runs on the controller's asyncio loop, where Ray warns about a
        # blocking `ray.get`; the loop has nothing else to do meanwhile.
        worker = threading.Thread(
            target=_settle_quietly, args=(self.wait_s,), name="tfdist_opt-lost-nodes", daemon=True
        )
        worker.start()
        worker.join(self.wait_s + 30)


def _settle_quietly(wait_s: float) -> None:
    try:
        lost = settle_lost_nodes(wait_s)
    except Exception as e:  # pylint: disable=broad-except
        _log.warning("tfdist_opt: could not check for lost Ray nodes: %s", e)
        return
    if lost:
        _log.warning(
            "tfdist_opt: Ray node(s) lost: %s; the group restarts on the nodes left",
            ", ".join(n[:8] for n in lost),
        )


def settle_lost_nodes(wait_s: float = 60.0, probe_s: float = 1.0) -> list[str]:
    """Waits until Ray has declared lost nodes dead; refreshes the elastic view.

    Every node Ray still lists alive whose raylet refuses a TCP connection
    (or does not answer in `probe_s`) is waited on until Ray declares it
    dead (at most `wait_s`); then `refresh_elastic_view()`, always: a node
    Ray declared dead before this call is still counted by the elastic view
    until its next 20 s refresh.

    Args:
        wait_s: float. Longest wait for Ray's verdict. Defaults to 60.
        probe_s: float. Connect timeout of each raylet probe. Defaults to 1.

    Returns:
        list of str. The node ids found lost.
    """
    lost = [
        n["NodeID"]
        for n in ray.nodes()
        if n.get("Alive")
        and not _accepts(n.get("NodeManagerAddress"), n.get("NodeManagerPort"), probe_s)
    ]
    deadline = time.monotonic() + wait_s
    while lost and time.monotonic() < deadline:
        alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}
        if not alive.intersection(lost):
            break
        time.sleep(0.2)
    refresh_elastic_view()
    return lost


def _accepts(host, port, timeout: float) -> bool:
    if not host or not port:
        return True  # nothing to probe: trust Ray
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return True
    except OSError:
        return False


def refresh_elastic_view(settle_s: float = 1.1) -> bool:
    """Makes Ray Train's elastic sizing see the nodes alive now.

    The coordinator recomputes its reservations from the node table
    (`get_reserved_resources(recompute=True)`), and the elastic policy's own
    1 s cache of the answer (`ElasticScalingPolicy.GET_RESERVED_RESOURCES_INTERVAL_S`)
    runs out in `settle_s`. Creates nothing: without a coordinator (a
    fixed-size group) it does nothing.

    Args:
        settle_s: float. Seconds to wait after the refresh. Defaults to 1.1.

    Returns:
        bool. Whether a coordinator was refreshed.
    """
    try:
        ray.get(_recompute(), timeout=15)
    except Exception:  # pylint: disable=broad-except
        return False  # none (fixed size), or Ray without it: Ray's own timing
    time.sleep(settle_s)
    return True


def _recompute():
    """Has the coordinator re-read the nodes; returns the call's ObjectRef.

    Raises (ValueError) when there is no coordinator: a fixed-size group.
    """
    coordinator = ray.get_actor(_COORDINATOR_NAME, namespace=_COORDINATOR_NAME)
    return coordinator.get_reserved_resources.remote("tfdist_opt", recompute=True)
