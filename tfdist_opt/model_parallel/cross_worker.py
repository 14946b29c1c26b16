"""Data parallelism across workers for a pipeline: all-reduce per stage device.

On a multi-worker TF_CONFIG each worker runs the whole pipeline over its own
local devices on its own shard of the data. After the micro-batches, each
stage's gradients are packed into one vector and averaged across workers by
one `CollectiveReduceV2` placed on the stage's device, so stage s of every
worker forms one collective group (group size = workers). Collective ops
must be enabled first (`enable()` creates a `MultiWorkerMirroredStrategy`,
which starts this worker's server; it must run before TensorFlow runs its
first op). Initial weights are made equal by broadcasting the chief's
(`broadcast_variables`, an all-reduce of the chief's values and zeros).
"""

from __future__ import annotations

import json
import os

import tensorflow as tf

# Far above the keys MultiWorkerMirroredStrategy hands out (from 1 up), so
# the pipeline's collectives never share a group or instance with its own.
_GROUP_KEY_BASE = 7_000_000
_INSTANCE_KEY_TRAIN = 7_000_000
_INSTANCE_KEY_BROADCAST = 8_000_000


def cluster_workers(environ=None) -> tuple[int, int, bool]:
    """`(num_workers, this task's rank, is_chief)` from TF_CONFIG (1, 0, True unset).

    Raises:
        ValueError: a cluster with parameter servers (a pipeline's variables
            live on its stage devices, not on parameter servers).
    """
    from tfdist_opt.cluster import tf_config as tf_config_lib  # pylint: disable=g-import-not-at-top

    cfg = tf_config_lib.tf_config_from_env(os.environ if environ is None else environ)
    if not cfg:
        return 1, 0, True
    cluster, task = cfg["cluster"], cfg["task"]
    if cluster.get("ps"):
        raise ValueError(
            "A pipeline cannot combine with parameter-server training: its "
            "variables live on the stage devices of every worker. Expected a "
            "TF_CONFIG with only `chief`/`worker` tasks. Received: TF_CONFIG "
            f"cluster roles {sorted(cluster)}"
        )
    order = [("chief", i) for i in range(len(cluster.get("chief", [])))] + [
        ("worker", i) for i in range(len(cluster.get("worker", [])))
    ]
    me = (task["type"], int(task.get("index", 0)))
    if me not in order:
        raise ValueError(
            "A pipeline runs on `chief`/`worker` tasks only. Received: TF_CONFIG "
            f"task {json.dumps(task)}"
        )
    rank = order.index(me)
    return len(order), rank, rank == 0


_ENABLED = []


def enable() -> None:
    """Starts this worker's collective runtime (once per process).

    Raises:
        RuntimeError: TensorFlow already ran an op and no multi-worker
            runtime was started (collectives are configured at start-up).
    """
    if _ENABLED:
        return
    options = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.RING
    )
    try:
        _ENABLED.append(tf.distribute.MultiWorkerMirroredStrategy(communication_options=options))
    except RuntimeError as e:
        # A MultiWorkerMirroredStrategy made earlier (e.g. opt_strategy())
        # already started the server: local device names carry the job.
        if not any(
            d.name.startswith(("/job:worker", "/job:chief"))
            for d in tf.config.list_logical_devices()
        ):
            raise RuntimeError(
                "Cannot combine the pipeline with data parallelism across "
                "workers: TensorFlow already ran an op, and collectives can only "
                "be configured at start-up. Call `pipeline(...)` (or "
                "`tfdist_opt.opt_strategy()`) before any other TensorFlow op, or "
                "pass cross_worker=False."
            ) from e
        _ENABLED.append(None)


def _all_reduce(tensor, group_size, group_key, instance_key, final_op):
    return tf.raw_ops.CollectiveReduceV2(
        input=tensor,
        group_size=group_size,
        group_key=group_key,
        instance_key=instance_key,
        ordering_token=[],
        merge_op="Add",
        final_op=final_op,
        communication_hint="ring",
    )


def _packed(values, devices, instance_base, final_op, num_workers):
    """Per stage: pack, all-reduce on the stage's device, unpack."""
    out, previous = [], []
    for s, (vals, device) in enumerate(zip(values, devices)):
        if not vals:
            out.append([])
            continue
        with tf.device(device), tf.control_dependencies(previous):
            flat = tf.concat([tf.reshape(tf.cast(v, tf.float32), [-1]) for v in vals], axis=0)
            reduced = _all_reduce(
                flat, num_workers, _GROUP_KEY_BASE + s, instance_base + s, final_op
            )
            sizes = [int(v.shape.num_elements()) for v in vals]
            parts = tf.split(reduced, sizes)
            out.append([tf.cast(tf.reshape(p, v.shape), v.dtype) for p, v in zip(parts, vals)])
        previous = [reduced]  # the same collective order on every worker
    return out


def all_reduce_mean(grads_per_stage, devices):
    """Averages each stage's gradients across workers, on the stage's device."""
    num_workers, _, _ = cluster_workers()
    if num_workers == 1:
        return grads_per_stage
    return _packed(grads_per_stage, devices, _INSTANCE_KEY_TRAIN, "Div", num_workers)


def broadcast_variables(vars_per_stage, devices) -> None:
    """Gives every worker the chief's variable values (a collective sum)."""
    num_workers, _, is_chief = cluster_workers()
    if num_workers == 1:
        return

    @tf.function
    def run():
        values = [[v if is_chief else tf.zeros_like(v) for v in vs] for vs in vars_per_stage]
        values = [[tf.convert_to_tensor(v) for v in vs] for vs in values]
        reduced = _packed(values, devices, _INSTANCE_KEY_BROADCAST, "Id", num_workers)
        for vs, rs in zip(vars_per_stage, reduced):
            for v, r in zip(vs, rs):
                v.assign(r)

    run()
