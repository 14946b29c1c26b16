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
every node whose raylet refuses connections, or does not answer a connect
within a second, is declared dead, then makes the coordinator re-read the
nodes: the restart is sized from the nodes alive. While a group runs it has
the coordinator re-read the nodes every resize interval (at most 20 s), so
a node that joins is seen at Ray's next resize check.

A node that stops answering without refusing (a cut link, a host powered
off: no RST) stays alive in Ray's view, with its CPUs, until the GCS health
check of its raylet gives up: with Ray's defaults (a check every 3 s, 10 s
to answer, dead after 5 misses) about a minute after the cut. Nothing
outside the GCS can declare it dead sooner (GCS `DrainNode` asks the
unreachable raylet itself to stop), and a restart sized while it still
counts waits 60 s for a placement there; so the hold lasts until Ray's
verdict (at most `wait_s`, 90 s by default), and a head started with
shorter health checks (`RAY_health_check_period_ms`,
`RAY_health_check_timeout_ms`, `RAY_health_check_failure_threshold` in the
environment of `ray start --head`) gives it sooner. Given the launcher's
log queue (`notices`), the callback says in the launcher's output which
nodes it waits for, and when the group restarts without them.

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
            Defaults to 90: Ray's default health check gives up on a node
            that does not answer about a minute after it stopped answering.
        refresh_s: float. Seconds between refreshes while the group runs;
            at most Ray's own 20 s. Defaults to 20.
        notices: a `ray.util.queue.Queue` or None. Where to put the lines
            that say which nodes a restart waits for, as `(None, 2, line)`
            items (the `--ray` launcher's log queue, printed `[launch]`).
            Defaults to None: the lines go to the controller's log only.

    Example:
        >>> import ray.train  # doctest: +SKIP
        >>> run_config = ray.train.RunConfig(callbacks=[LostNodeCallback()])
    """

    def __init__(self, wait_s: float = 90.0, refresh_s: float = 20.0, notices=None):
        self.wait_s = wait_s
        self.refresh_s = min(float(refresh_s), 20.0)
        self.notices = notices
        # Set in the controller's process at its first update, not here:
        # this object is built in the driver, whose clock (on another host)
        # does not compare.
        self._refreshed = None
        # {node id: "address (id)"} of the nodes alive while a group ran, so
        # a restart can name the nodes Ray declared dead before it began.
        self._known = {}

    def after_controller_state_update(self, previous_state, current_state):
        # Called after every controller loop iteration (each poll of the
        # workers); only a running group is checked for room to grow.
        del previous_state
        if type(current_state).__name__ != "RunningState":
            return
        now = time.monotonic()
        first = self._refreshed is None
        if not first and now - self._refreshed < self.refresh_s:
            return
        self._refreshed = now
        try:
            self._known = _alive_nodes()
        except Exception:  # pylint: disable=broad-except
            pass  # Ray's node table unreadable now: keep the last one
        if first:
            return
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
            target=_settle_quietly,
            args=(self.wait_s, self.notices, dict(self._known)),
            name="tfdist_opt-lost-nodes",
            daemon=True,
        )
        worker.start()
        worker.join(self.wait_s + 30)


def _settle_quietly(wait_s: float, notices, known: dict) -> None:
    def notify(line):
        _log.warning("tfdist_opt: %s", line)
        if notices is not None:
            try:
                notices.put((None, 2, line), timeout=5)
            except Exception:  # pylint: disable=broad-except
                pass  # the launcher is gone, or its queue is: the log has it

    try:
        settle_lost_nodes(wait_s, notify=notify, known=known)
    except Exception as e:  # pylint: disable=broad-except
        _log.warning("tfdist_opt: could not check for lost Ray nodes: %s", e)


def _label(node) -> str:
    return f"{node.get('NodeManagerAddress')} ({node['NodeID'][:8]})"


def _alive_nodes() -> dict:
    """{node id: "address (id)"} of the nodes Ray lists alive."""
    return {n["NodeID"]: _label(n) for n in ray.nodes() if n.get("Alive")}


def settle_lost_nodes(
    wait_s: float = 90.0, probe_s: float = 1.0, notify=None, known: dict | None = None
) -> list[str]:
    """Waits until Ray has declared lost nodes dead; refreshes the elastic view.

    Every node Ray still lists alive whose raylet refuses a TCP connection
    (or does not answer in `probe_s`) is waited on until Ray declares it
    dead (at most `wait_s`); then `refresh_elastic_view()`, always: a node
    Ray declared dead before this call is still counted by the elastic view
    until its next 20 s refresh.

    Args:
        wait_s: float. Longest wait for Ray's verdict. Defaults to 90.
        probe_s: float. Connect timeout of each raylet probe. Defaults to 1.
        notify: callable or None. Called with a line when nodes that do not
            answer are found, and with one naming the lost nodes when the
            wait ends.
        known: dict or None. {node id: label} of the nodes alive while the
            group ran: those Ray has declared dead since are named as lost
            too (no wait: Ray's verdict is in).

    Returns:
        list of str. The node ids found lost: those that did not answer,
        then those of `known` that Ray had declared dead.
    """
    nodes = ray.nodes()
    alive_now = {n["NodeID"] for n in nodes if n.get("Alive")}
    lost = {
        n["NodeID"]: _label(n)
        for n in nodes
        if n.get("Alive")
        and not _accepts(n.get("NodeManagerAddress"), n.get("NodeManagerPort"), probe_s)
    }
    gone = {i: label for i, label in (known or {}).items() if i not in alive_now}
    if lost and notify:
        notify(
            f"Ray node(s) {', '.join(lost.values())} do not answer: the restart "
            f"waits until Ray declares them dead (at most {wait_s:g} s; Ray's "
            "health check decides: RAY_health_check_* on `ray start --head`)"
        )
    t0 = time.monotonic()
    alive = set(lost)
    while alive and time.monotonic() - t0 < wait_s:
        alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}.intersection(lost)
        if alive:
            time.sleep(0.2)
    refresh_elastic_view()
    if (lost or gone) and notify:
        names = ", ".join([*lost.values(), *gone.values()])
        waited = f" after {time.monotonic() - t0:.1f} s" if lost else ""
        if alive:
            names = ", ".join(lost[i] for i in sorted(alive))
            notify(
                f"Ray still lists node(s) {names} alive{waited}: the group "
                "restarts anyway (Ray may wait for a placement there)"
            )
        else:
            notify(
                f"Ray declared node(s) {names} dead{waited}: the group restarts on the nodes left"
            )
    return [*lost, *gone]


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
