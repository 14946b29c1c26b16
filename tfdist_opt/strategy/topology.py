"""`Topology`: what this process is — its devices and its TF_CONFIG role.

The dataclass and its properties are pure; `detect_topology()` asks
TensorFlow for the physical GPUs (listing physical devices does not
initialise the runtime, so virtual devices can still be configured after).
A GPU the user split into logical devices
(`tf.config.set_logical_device_configuration` with memory limits, read back
without initialising the runtime) counts one GPU per logical device, as TF
then shows them (`/gpu:0`, `/gpu:1`, ... on one physical GPU).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping, Sequence

from tfdist_opt.cluster import jobset
from tfdist_opt.cluster import tf_config as tf_config_lib

EVALUATOR = "evaluator"


@dataclasses.dataclass(frozen=True)
class Topology:
    """This process's place in the job.

    Attributes:
        gpus: tuple of str. GPU device names visible here: one per
            physical GPU, or one per logical device of a GPU the user split.
        tf_config: dict or None. The validated TF_CONFIG, if set.
        configured_gpus: int. Physical GPUs with a logical device
            configuration (memory limits) set by the user: TF refuses memory
            growth on them, their limits bound the memory instead.
        split_gpus: int. Of those, GPUs split into several logical devices
            (each then shows as several entries of `gpus`): NCCL refuses two
            ranks on one physical GPU.
    """

    gpus: tuple[str, ...] = ()
    tf_config: dict[str, Any] | None = None
    configured_gpus: int = 0
    split_gpus: int = 0

    @property
    def num_gpus(self) -> int:
        return len(self.gpus)

    @property
    def is_evaluator(self) -> bool:
        """The side-car `evaluator` task: outside the training cluster."""
        return self.task_type == EVALUATOR

    @property
    def num_workers(self) -> int:
        """Tasks taking part in collectives (chief + workers); 1 if none.

        1 on the evaluator, which takes part in no collective (TF's rule).
        """
        if self.tf_config is None or self.is_evaluator:
            return 1
        return max(1, tf_config_lib.num_tasks(self.tf_config))

    @property
    def is_multi_worker(self) -> bool:
        return self.num_workers > 1

    @property
    def task_type(self) -> str | None:
        return None if self.tf_config is None else self.tf_config["task"]["type"]

    @property
    def task_index(self) -> int | None:
        return None if self.tf_config is None else self.tf_config["task"]["index"]

    @property
    def is_chief(self) -> bool:
        """Chief: the `chief` task, or worker 0 when the cluster has no chief."""
        if self.tf_config is None:
            return True
        return is_chief(
            self.task_type, self.task_index, bool(self.tf_config["cluster"].get("chief"))
        )

    def describe(self) -> str:
        role = (
            "none (no TF_CONFIG)"
            if self.tf_config is None
            else f"{self.task_type}:{self.task_index} (side-car, outside the training cluster)"
            if self.is_evaluator
            else f"{self.task_type}:{self.task_index} of {self.num_workers} "
            f"task(s){' (chief)' if self.is_chief else ''}"
        )
        split = f" (logical devices of {self.split_gpus} split GPU(s))" if self.split_gpus else ""
        return f"GPUs: {self.num_gpus}{split}; TF_CONFIG role: {role}"


def is_chief(task_type: str | None, task_index: int | None, cluster_has_chief: bool) -> bool:
    """The one chief rule: the `chief` task, or worker 0 when there is none.

    A process with no task type (no TF_CONFIG) is its own chief. Used by
    `Topology.is_chief` and by code that only has a cluster resolver.
    """
    if task_type in (None, "chief"):
        return True
    return task_type == "worker" and task_index == 0 and not cluster_has_chief


def strategy_is_chief(strategy) -> bool:
    """`is_chief` for the task a `tf.distribute` strategy runs as.

    True for a strategy without a cluster resolver or task type (one
    process, a plain MirroredStrategy) and for None.
    """
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return True
    return is_chief(
        resolver.task_type, resolver.task_id, bool(resolver.cluster_spec().as_dict().get("chief"))
    )


def task_type(environ: Mapping[str, str] | None = None) -> str | None:
    """This process's TF_CONFIG task type, or None without TF_CONFIG.

    Pure (reads the environment only, no TensorFlow), so a script can
    branch before it builds anything, e.g. run the side-car evaluator on
    the `evaluator` task and train on every other task.

    Args:
        environ: mapping or None. Environment to read TF_CONFIG from.
            Defaults to `os.environ`.

    Returns:
        `"chief"`, `"worker"`, `"ps"`, `"evaluator"`, or None.

    Raises:
        TFConfigError: (a ValueError) TF_CONFIG is set but invalid.

    Example:
        >>> if tfdist_opt.task_type() == "evaluator":  # doctest: +SKIP
        ...     tfdist_opt.SidecarEvaluator(model, data, "ckpt").start()
    """
    cfg = tf_config_lib.tf_config_from_env(environ)
    return None if cfg is None else cfg["task"]["type"]


def detect_topology(
    environ: Mapping[str, str] | None = None, gpus: Sequence[str] | None = None
) -> Topology:
    """Reads TF_CONFIG (validated) and lists the GPUs.

    A physical GPU split into logical devices before this call counts one
    GPU per logical device (named `<physical name>/logical:<j>`).

    Args:
        environ: mapping or None. Environment to read TF_CONFIG from.
            Defaults to `os.environ`.
        gpus: sequence of str or None. GPU names to assume instead of asking
            TensorFlow (for tests and dry runs). Defaults to asking TF.
    """
    environ = os.environ if environ is None else environ
    # A JobSet pod of `tfdist-opt k8s --kind trainjob` has no TF_CONFIG: write
    # it from the pod's index (tfdist_opt.cluster.jobset) before TF reads it.
    jobset.apply_jobset_tf_config(environ)
    cfg = tf_config_lib.tf_config_from_env(environ)
    configured = split = 0
    if gpus is None:
        import tensorflow as tf  # pylint: disable=g-import-not-at-top

        gpus = []
        for device in tf.config.list_physical_devices("GPU"):
            try:
                logical = tf.config.get_logical_device_configuration(device) or ()
            except ValueError:  # a device TF's own list lacks (a stand-in list)
                logical = ()
            configured += bool(logical)
            if len(logical) > 1:
                split += 1
                gpus += [f"{device.name}/logical:{j}" for j in range(len(logical))]
            else:
                gpus.append(device.name)
    return Topology(gpus=tuple(gpus), tf_config=cfg, configured_gpus=configured, split_gpus=split)
