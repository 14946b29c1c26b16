"""The `--ray` launcher's own pieces on the cluster: its actors and its output pump.

The attempt counter and the workers' log queue live on the head node (a
lost worker node must not take them along); `Pump` prints the queued lines
prefixed `[worker i]`. Imports Ray only inside its functions.
"""

from __future__ import annotations

import threading
import time

# The resource Ray gives the head node only (`ray.nodes()[i]["Resources"]`).
HEAD_RESOURCE = "node:__internal_head__"


def on_head_node():
    """Scheduling strategy for the launcher's actors: the head node.

    The head outlives any worker node (the cluster ends with it); "this
    process's node" does not always: a driver joins the raylet Ray finds at
    its own address, and where several nodes share one address (a
    `ray.cluster_utils.Cluster`, nodes in containers on one host) that can
    be a worker node. The attempt counter and the log queue placed there
    died with it, and no later group could start (its `on_start` asks the
    counter). Hard affinity: with a soft one Ray placed the first of these
    actors on another node of the same address. Falls back to this
    process's node (soft) when no node is marked head.
    """
    import ray  # pylint: disable=g-import-not-at-top
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # pylint: disable=g-import-not-at-top

    heads = [
        n["NodeID"]
        for n in ray.nodes()
        if n.get("Alive") and HEAD_RESOURCE in (n.get("Resources") or {})
    ]
    if heads:  # hard: a soft affinity placed the first actor elsewhere
        return NodeAffinitySchedulingStrategy(heads[0], soft=False)
    return NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True)


def attempts_actor(strategy):
    import ray  # pylint: disable=g-import-not-at-top

    @ray.remote(num_cpus=0, scheduling_strategy=strategy)
    class Attempts:
        """Counts worker-group starts: the launcher's restart count."""

        def __init__(self):
            self.n = -1

        def next(self):
            self.n += 1
            return self.n

        def count(self):
            return self.n

    return Attempts.remote()


class Pump(threading.Thread):
    """Prints the workers' queued lines prefixed `[worker i]` (`[launch]` for
    the launcher's own notices from the cluster, queued with index None)."""

    def __init__(self, queue, out, err, lock):
        super().__init__(daemon=True)
        self.queue, self.out, self.err, self.lock = queue, out, err, lock
        self._halt = threading.Event()

    def run(self):
        while not self._halt.is_set():
            if not self._drain(0.2):
                time.sleep(0.05)

    def _drain(self, timeout) -> bool:
        try:
            items = [self.queue.get(timeout=timeout)]
            items += self.queue.get_nowait_batch(self.queue.qsize())
        except Exception:  # pylint: disable=broad-except
            return False
        with self.lock:
            for index, fd, line in items:
                stream = self.out if fd == 1 else self.err
                # index None: a line of the launcher's own pieces on the
                # cluster (tfdist_opt.launch.ray_elastic's lost-node notices)
                tag = "launch" if index is None else f"worker {index}"
                stream.write(f"[{tag}] {line}\n")
            self.out.flush()
            self.err.flush()
        return True

    def stop(self):
        if self._halt.is_set():
            return
        self._halt.set()
        self.join(timeout=5)
        while self._drain(0.1):
            pass
