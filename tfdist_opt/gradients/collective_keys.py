"""Group and instance keys of the collectives tfdist_opt issues itself.

ZeRO's reduce-scatter and gather (`zero_collectives`) and the streamed
all-reduce (`streams`) call TF's collective ops directly, outside TF's
`CollectiveReplicaLauncher`, so they need keys of their own:

* the group key is derived from the replica count and the local device
  names (the same on every worker, distinct per device set in one
  process), above TF's own group keys (counted from 1) and below
  `model_parallel.cross_worker`'s (7,000,000+);
* instance keys count per (group, replica) at trace time, so every
  replica and every worker gives the same collective the same key, as
  long as they trace the same collectives in the same order (they run
  the same program).
"""

from __future__ import annotations

import threading
import zlib

import tensorflow as tf

_GROUP_KEY_BASE = 5_000_000
_GROUP_KEY_RANGE = 1_000_000
_LOCK = threading.Lock()
_INSTANCE_KEYS: dict[tuple[int, int], int] = {}


def group_key(strategy) -> int:
    """The collective group key of `strategy`'s replicas (same on every worker)."""
    n = strategy.num_replicas_in_sync
    names = []
    for d in strategy.extended.worker_devices:
        spec = tf.DeviceSpec.from_string(d)
        names.append(f"{spec.device_type}:{spec.device_index}")
    desc = f"tfdist_opt.zero|{n}|{','.join(names)}"
    return _GROUP_KEY_BASE + zlib.crc32(desc.encode()) % _GROUP_KEY_RANGE


def next_instance_key(group: int, replica: int) -> int:
    """A new instance key for `replica`'s next collective in `group`."""
    with _LOCK:
        key = _INSTANCE_KEYS.get((group, replica), 0) + 1
        _INSTANCE_KEYS[(group, replica)] = key
        return key


def static_replica_id(ctx, setting: str) -> int:
    """The replica id of replica context `ctx` as a Python int.

    Args:
        ctx: a `tf.distribute.ReplicaContext`.
        setting: str. What needs it, for the error.
    """
    r = tf.get_static_value(ctx.replica_id_in_sync_group)
    if r is None:
        raise RuntimeError(
            f"tfdist_opt {setting} needs a static replica id (a tf.distribute replica context)."
        )
    return int(r)
