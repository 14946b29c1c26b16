"""One CPU replica per worker: a plain `tf.data` iterator, not a MultiDeviceIterator.

TF's multi-worker strategy feeds a worker's replicas through a
`MultiDeviceIterator` (`input_lib._SingleWorkerOwnedDatasetIterator`) made
anew for every iterator: each `fit` epoch, `evaluate` and `predict`. Making
one traces its per-device functions each time (TF 2.21, also for one CPU
device) and starts a background thread that prefetches into a per-device
buffer. With one replica on the worker's own CPU (what `opt_strategy()`
builds on a host without accelerators) that buffer copies nothing
anywhere: the replica reads the host's memory.

For such a worker, a distributed dataset made with no `InputOptions` gets
TF's own per-replica options with no fetch to device
(`InputReplicationMode.PER_REPLICA`, `experimental_fetch_to_device=False`),
for which TF's iterator is `iter(dataset)` on the worker, its one element
the replica's batch: the same batches in the same order (TF's sharding and
rebatching are unchanged, they happen when the dataset is distributed), the
same end-of-data agreement across workers. Making it traces nothing and
starts no thread of its own reading ahead of the step (only the dataset's
own prefetch does).

Several replicas per worker, any accelerator, or options of the caller's
own: TF's path unchanged.
"""

from __future__ import annotations

import tensorflow as tf

# One object for every dataset: TF's iterator type spec compares options by
# identity, and a new object per dataset would retrace Keras's step function
# at each `fit` / `evaluate` / `predict`.
_OPTIONS = tf.distribute.InputOptions(
    experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA,
    experimental_fetch_to_device=False,
)


def one_cpu_replica(strategy) -> bool:
    """True when `strategy` runs one replica per worker, on a CPU."""
    devices = strategy.extended.worker_devices
    return len(devices) == 1 and tf.DeviceSpec.from_string(devices[0]).device_type == "CPU"


def apply(strategy, distributed):
    """Makes `distributed`'s iterators plain ones where the module docstring says.

    Args:
        strategy: the multi-worker strategy that made `distributed`.
        distributed: what its `experimental_distribute_dataset` or
            `distribute_datasets_from_function` returned; it keeps the
            caller's `InputOptions` (`_options`, None for TF's defaults).

    Returns:
        `distributed`.
    """
    if getattr(distributed, "_options", 0) is None and one_cpu_replica(strategy):
        distributed._options = _OPTIONS  # pylint: disable=protected-access
    return distributed
