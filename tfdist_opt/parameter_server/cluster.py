"""Parameter-server clusters: server config, in-process clusters, strategy.

TF's gRPC servers running `ClusterCoordinator` closures hang with two or more
workers unless every worker server has `inter_op_parallelism_threads >=
num_workers + 1` (TF's own multi_worker_test_base sets exactly this; seen on
TF 2.21): one thread per concurrent closure plus one for the server.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf

from tfdist_opt.cluster import sources


def server_config(num_workers: int) -> tf.compat.v1.ConfigProto:
    """The ConfigProto a worker or ps server needs for `num_workers` workers."""
    config = tf.compat.v1.ConfigProto()
    config.inter_op_parallelism_threads = max(2, num_workers + 1)
    return config


def partitioner(min_shard_bytes: int, max_shards: int):
    """`MinSizePartitioner`, or None when variables are not to be sharded.

    A variable is cut into shards of at least `min_shard_bytes` bytes, into
    at most `max_shards` shards (0 or 1: no partitioning).
    """
    if max_shards <= 1:
        return None
    return tf.distribute.experimental.partitioners.MinSizePartitioner(
        min_shard_bytes=min_shard_bytes, max_shards=max_shards
    )


class InProcessCluster:
    """Worker and ps servers in this process, on free 127.0.0.1 ports.

    For tests, benchmarks and trying PS training on one machine. The
    servers live until the process exits (TF cannot stop a server inside its
    process).

    Args:
        num_workers: int. Worker servers. Defaults to `2`.
        num_ps: int. Parameter servers. Defaults to `2`.

    Example:
        >>> cluster = InProcessCluster(num_workers=2, num_ps=2)  # doctest: +SKIP
        >>> strategy = cluster.strategy()
    """

    def __init__(self, num_workers: int = 2, num_ps: int = 2):
        for name, value in (("num_workers", num_workers), ("num_ps", num_ps)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"Invalid value for `{name}`: expected a positive "
                    f"int. Received: {name}={value!r}"
                )
        ports = sources.free_ports(num_workers + num_ps)
        addresses = [f"127.0.0.1:{p}" for p in ports]
        self.cluster_def: dict[str, list[str]] = {
            "worker": addresses[:num_workers],
            "ps": addresses[num_workers:],
        }
        spec = tf.train.ClusterSpec(self.cluster_def)
        self.servers = []
        for i in range(num_workers):
            self.servers.append(
                tf.distribute.Server(
                    spec,
                    job_name="worker",
                    task_index=i,
                    protocol="grpc",
                    config=server_config(num_workers),
                    start=True,
                )
            )
        for i in range(num_ps):
            self.servers.append(
                tf.distribute.Server(
                    spec,
                    job_name="ps",
                    task_index=i,
                    protocol="grpc",
                    config=server_config(num_workers),
                    start=True,
                )
            )
        self.resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(spec, rpc_layer="grpc")

    def strategy(self, min_shard_bytes: int = 256 << 10, max_shards: int = 0, **kwargs: Any):
        """A `KerasParameterServerStrategy` over this cluster."""
        from tfdist_opt.parameter_server import strategy as strategy_lib

        return strategy_lib.KerasParameterServerStrategy(
            self.resolver, variable_partitioner=partitioner(min_shard_bytes, max_shards), **kwargs
        )
