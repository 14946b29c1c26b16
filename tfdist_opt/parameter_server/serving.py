"""What worker and ps tasks do: serve until the chief is done, then exit 0.

In parameter-server training only the chief runs the user's training loop;
workers execute the closures it schedules and ps tasks hold variables. So
`opt_strategy()` on a worker or ps task starts the TF server and never
returns: the same script runs on every task. TF servers have no shutdown
(`join()` waits forever), so each serving task watches the chief's port: once
the chief has been seen and then stops answering for `grace_s`, the task
exits with status 0. A chief that never appears within `startup_timeout_s`
is an error (exit 1, one line naming the chief's address).
"""

from __future__ import annotations

import os
import socket
import sys
import time
from typing import Any, Mapping

from tfdist_opt.cluster import tf_config as tf_config_lib


def _answers(address: str, timeout: float = 1.0) -> bool:
    host, port = tf_config_lib.split_address(address)
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return True
    except OSError:
        return False


def watch_chief(
    chief_address: str,
    startup_timeout_s: float | None,
    grace_s: float = 3.0,
    poll_s: float = 0.5,
    clock=time.monotonic,
    sleep=time.sleep,
    answers=_answers,
) -> str:
    """Blocks until the chief has come and gone; returns "done" or "never came".

    Pure logic over `answers(address)`, so it is testable without TF.
    """
    start = clock()
    seen = False
    gone_since = None
    while True:
        up = answers(chief_address)
        now = clock()
        if up:
            seen, gone_since = True, None
        elif seen:
            gone_since = now if gone_since is None else gone_since
            if now - gone_since >= grace_s:
                return "done"
        elif startup_timeout_s is not None and now - start > startup_timeout_s:
            return "never came"
        sleep(poll_s)


def serve(
    tf_config: Mapping[str, Any], startup_timeout_s: float | None = 300.0, grace_s: float = 3.0
) -> None:
    """Runs this worker/ps task's server until the chief finishes; exits the process.

    Args:
        tf_config: dict. This task's validated TF_CONFIG (type worker or ps).
        startup_timeout_s: float or None. How long to wait for the chief to
            appear. Defaults to `300`.
        grace_s: float. How long the chief must be unreachable before this
            task concludes the job is over. Defaults to `3`.
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    from tfdist_opt.parameter_server import cluster as cluster_lib

    task = tf_config["task"]
    cluster = tf_config["cluster"]
    num_workers = len(cluster.get("worker", []))
    chief = cluster["chief"][0]
    server = tf.distribute.Server(  # the evaluator is not part of the cluster
        tf.train.ClusterSpec(tf_config_lib.training_cluster(tf_config)),
        job_name=task["type"],
        task_index=task["index"],
        protocol=tf_config.get("rpc_layer") or "grpc",
        config=cluster_lib.server_config(num_workers),
        start=True,
    )
    del server  # lives until the process exits
    print(
        f"tfdist_opt: {task['type']}:{task['index']} serving; waiting for the "
        f"chief ({chief}) to finish",
        file=sys.stderr,
        flush=True,
    )
    outcome = watch_chief(chief, startup_timeout_s, grace_s=grace_s)
    sys.stdout.flush()
    sys.stderr.flush()
    if outcome == "done":
        print(
            f"tfdist_opt: {task['type']}:{task['index']}: the chief finished; exiting",
            file=sys.stderr,
            flush=True,
        )
        os._exit(0)  # a TF server cannot be stopped; exit without waiting on it
    print(
        f"tfdist_opt: {task['type']}:{task['index']}: the chief ({chief}) never "
        f"answered within startup_timeout_s={startup_timeout_s}; exiting",
        file=sys.stderr,
        flush=True,
    )
    os._exit(1)
