"""Ray Train's TensorFlow backend with held ports and the launcher's worker env.

`TensorflowConfig()` replaces `ray.train.tensorflow.TensorflowConfig` as the
`tensorflow_config` of a Ray Train V2 `TensorflowTrainer`. Like Ray's, it
gives every worker actor a TF_CONFIG built from the node addresses Ray
reports (`ray.util.get_node_ip_address()`) in world-rank order, so
`tfdist_opt.opt_strategy()` in the training function plans the same
multi-worker strategy as under `tfdist-opt launch`. It differs in four ways:

- The port is held, not just picked. Ray's backend binds port 0, closes the
  socket and writes the number into TF_CONFIG; anything that binds a port in
  between (another job, another worker) takes it and the TF server then fails
  to start. Here each worker binds port 0 with `SO_REUSEADDR` and keeps that
  socket open (not listening) until the worker ends: the kernel never hands a
  held port to another bind, and TF's gRPC server, which binds with
  `SO_REUSEADDR` too, binds it over the held socket. Nothing can take the
  port between the pick and TF's bind, so there is nothing to retry.
- The environment is the launcher's: `TFDIST_LAUNCH_WORKER_INDEX` (the world
  rank), `TFDIST_LAUNCH_NUM_WORKERS`, and `TFDIST_LAUNCH_RESTART_COUNT` when a
  launch passes it. Ray's backend also sets `TF_USE_LEGACY_KERAS=1` (for
  `tf.keras` to be Keras 2); that is left unset here, as under the launcher,
  so a script sees the same Keras either way.
- With one worker no TF_CONFIG is set (as the launcher does): one process,
  no server.
- Importing it does not import TensorFlow. `ray.train.tensorflow` imports
  TensorFlow in its package `__init__` (3-4 CPU-seconds), so a config
  derived from Ray's would load TensorFlow into the launcher and into Ray's
  train controller, neither of which runs a TF op; this one derives from
  Ray's `BackendConfig` and reports the same `framework`.

Ray turns a loopback node address into the host's interface address on
purpose (`services.resolve_ip_for_localhost`); `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`
in the environment of the process that starts Ray keeps every node address
127.0.0.1 (`PIN_LOOPBACK_ENV`). `tfdist-opt launch --ray` sets it when it
starts a local Ray itself.

This module imports Ray; import it only where Ray is installed
(`pip install tfdist_opt[ray]`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
from typing import Sequence

import ray
from ray.train.backend import Backend
from ray.train.backend import BackendConfig

from tfdist_opt.cluster import tf_config as tf_config_lib
from tfdist_opt.coordination.task_env import NUM_WORKERS_ENV
from tfdist_opt.coordination.task_env import RESTART_COUNT_ENV
from tfdist_opt.coordination.task_env import WORKER_INDEX_ENV

PIN_LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"

_held: list[socket.socket] = []  # this worker process's held port(s)


def reserve_port(host: str = "") -> int:
    """Binds a free port and holds it for this process; returns the port.

    The socket is bound with `SO_REUSEADDR` and never listens, so a later
    port-0 bind anywhere on the host never gets this port while a server
    binding it with `SO_REUSEADDR` (TF's gRPC server) still can. It stays
    open until `release_ports()` or the process ends.

    Args:
        host: str. Address to bind; `""` (all) keeps the port from every
            interface. Defaults to `""`.

    Returns:
        int. The port.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    _held.append(sock)
    return sock.getsockname()[1]


def release_ports() -> None:
    """Closes the sockets `reserve_port()` holds in this process."""
    while _held:
        _held.pop().close()


def worker_address() -> str:
    """`ip:port` of this Ray worker: its node address and a held port."""
    ip = ray.util.get_node_ip_address()
    port = reserve_port()
    return f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"


def worker_environment(
    addresses: Sequence[str], index: int, restart_count: int | None = None
) -> dict[str, str]:
    """Pure: the variables worker `index` of `addresses` gets.

    Args:
        addresses: sequence of str. Every worker's `host:port`, rank order.
        index: int. This worker's world rank.
        restart_count: int or None. Group restarts so far, when known.

    Returns:
        dict. `TF_CONFIG` (only with 2+ workers; empty string otherwise,
        meaning "remove") and the launcher's `TFDIST_LAUNCH_*` variables.
    """
    n = len(addresses)
    env = {WORKER_INDEX_ENV: str(index), NUM_WORKERS_ENV: str(n), "TF_CONFIG": ""}
    if n > 1:
        env["TF_CONFIG"] = json.dumps(
            tf_config_lib.build_tf_config({"worker": list(addresses)}, "worker", index)
        )
    if restart_count is not None:
        env[RESTART_COUNT_ENV] = str(restart_count)
    return env


def _apply(env: dict[str, str]) -> None:
    for key, value in env.items():
        if value == "":
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def _setup_worker(addresses, index, restart_count):
    _apply(worker_environment(addresses, index, restart_count))


class _Backend(Backend):
    """Sets each worker's TF_CONFIG from its node address and a held port."""

    def on_start(self, worker_group, backend_config):
        addresses = worker_group.execute(worker_address)
        restart_count = backend_config.restart_count()
        ray.get(
            [
                worker_group.execute_single_async(i, _setup_worker, addresses, i, restart_count)
                for i in range(len(worker_group))
            ]
        )

    def on_shutdown(self, worker_group, backend_config):
        del backend_config
        try:
            worker_group.execute(release_ports)
        except Exception:  # pylint: disable=broad-except
            pass  # the workers are gone; their sockets went with them


@dataclasses.dataclass
class TensorflowConfig(BackendConfig):
    """`tensorflow_config` for Ray Train's `TensorflowTrainer` (V2).

    Args:
        attempts: a Ray actor handle with a `next.remote()` method returning
            the attempt number (0, 1, ...) or None. `tfdist-opt launch
            --ray` passes one so workers see `TFDIST_LAUNCH_RESTART_COUNT`
            as under the local launcher. Defaults to `None` (not set).

    Example:
        >>> from ray.train.tensorflow import TensorflowTrainer  # doctest: +SKIP
        >>> from tfdist_opt.launch.ray_backend import TensorflowConfig
        >>> trainer = TensorflowTrainer(
        ...     train_fn, tensorflow_config=TensorflowConfig(),
        ...     scaling_config=ray.train.ScalingConfig(num_workers=2))
    """

    attempts: object = None

    @property
    def backend_cls(self):
        return _Backend

    @property
    def framework(self):
        # What Ray's own TensorflowConfig reports (its run state and
        # dashboard label the run TensorFlow); Ray keeps the enum private.
        from ray.train.v2._internal.util import TrainingFramework  # pylint: disable=g-import-not-at-top

        return TrainingFramework.TENSORFLOW

    def to_dict(self) -> dict:
        return {}  # as Ray's: `attempts` (an actor handle) is not state

    def restart_count(self) -> int | None:
        """The attempt number from `attempts`, or None without it."""
        if self.attempts is None:
            return None
        return int(ray.get(self.attempts.next.remote()))
