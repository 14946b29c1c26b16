"""The stall settings a multi-worker strategy carries, and its input marker.

`opt_strategy()` (multi-worker kind) stores `StallSettings` in the
strategy's runtime (`attach`); `fit` reads them (`settings_of`) to start
the inspector (`tfdist_opt.stall.keras_binding`). With the inspector on,
`attach` also makes the input marker, a local int64 variable that
`count_inputs` adds 1 to for every batch a worker's own input pipeline
produces (an identity `map` in tf.data's threads): the inspector's
`input` phase compares it with the steps begun.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tfdist_opt import runtime


@dataclasses.dataclass
class StallSettings:
    """What `attach` stores on a multi-worker strategy.

    Attributes:
        warn_s: float or None. `StrategyConfig.stall_warn_s`; `0`/None: no
            inspector (the uneven-inputs agreement still runs).
        abort_s: float or None. `StrategyConfig.stall_abort_s`.
        task: int. This worker's position among the chief and workers.
        names: dict. Position -> `chief 0` / `worker 1`.
        addresses: dict. Position -> `host:port` (from TF_CONFIG).
        collective_timeout_s: float or None. `StrategyConfig.collective_timeout_s`,
            enforced by the inspector's thread (not passed to TF).
        marker: tf.Variable or None. Batches this worker's input pipeline
            produced (None without the inspector).
        enabled: bool. Set False to skip the inspector for later `fit`s
            (`benchmarks/train.py --compare=stall` alternates it).
        counting: bool. False once a distributed dataset could not be
            counted (TF moved its per-worker datasets): no `input` phase then.
    """

    warn_s: float | None
    abort_s: float | None
    task: int
    names: dict
    marker: Any
    addresses: dict = dataclasses.field(default_factory=dict)
    collective_timeout_s: float | None = None
    enabled: bool = True
    counting: bool = True


def group_names(tf_config) -> tuple[int, dict]:
    """(this task's position, {position: label}) over chief then workers."""
    cluster = tf_config["cluster"]
    tasks = [(role, i) for role in ("chief", "worker") for i in range(len(cluster.get(role) or ()))]
    me = (tf_config["task"]["type"], int(tf_config["task"]["index"]))
    names = {n: f"{role} {i}" for n, (role, i) in enumerate(tasks)}
    return tasks.index(me), names


def group_addresses(tf_config) -> dict:
    """{position: host:port} over chief then workers (as `group_names`)."""
    cluster = tf_config["cluster"]
    return dict(
        enumerate(address for role in ("chief", "worker") for address in cluster.get(role) or ())
    )


def attach(strategy, config, tf_config) -> None:
    """Stores `StallSettings` in a multi-worker `strategy`'s runtime.

    Call outside any strategy scope (the marker must be a plain local
    variable, not a mirrored one).
    """
    if tf_config is None:
        return
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    task, names = group_names(tf_config)
    marker = None
    if config.stall_warn_s:
        with tf.device("/cpu:0"):
            marker = tf.Variable(0, dtype=tf.int64, trainable=False, name="tfdist_opt_input_marker")
    runtime.runtime_of(strategy).stall = StallSettings(
        config.stall_warn_s,
        config.stall_abort_s,
        task,
        names,
        marker,
        group_addresses(tf_config),
        config.collective_timeout_s,
    )


def set_enabled(strategy, enabled: bool) -> None:
    """Turns the inspector on or off for later `fit`s (a benchmark's A/B)."""
    s = _settings(strategy)
    if s is not None:
        s.enabled = enabled


def settings_of(strategy) -> StallSettings | None:
    s = _settings(strategy)
    return s if s is not None and s.enabled else None


def _settings(strategy) -> StallSettings | None:
    state = runtime.peek(strategy)
    return None if state is None else state.stall


def count_inputs(strategy, distributed):
    """Counts the batches each worker's own input pipeline produces.

    `distributed` is what `experimental_distribute_dataset` or
    `distribute_datasets_from_function` returned; its per-worker datasets
    (after TF's sharding and rebatching) get one identity `map` that adds
    1 to the marker per element, in tf.data's own threads. Returns
    `distributed`.
    """
    s = settings_of(strategy)
    if s is None or s.marker is None:
        return distributed
    attr = next(
        (
            a
            for a in ("_cloned_datasets", "_datasets")
            if isinstance(getattr(distributed, a, None), list)
        ),
        None,
    )
    if attr is None:
        s.counting = False
        return distributed
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    marker = s.marker

    # No autograph: a converted function is written to the temp dir as
    # `__autograph_generated_file*.py` (and this one needs no conversion).
    @tf.autograph.experimental.do_not_convert
    def count(*element):
        with tf.control_dependencies([marker.assign_add(1)]):
            return tf.nest.map_structure(
                tf.identity, element if len(element) > 1 else element[0], expand_composites=True
            )

    setattr(distributed, attr, [d.map(count) for d in getattr(distributed, attr)])
    return distributed
