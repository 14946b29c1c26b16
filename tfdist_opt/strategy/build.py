"""`opt_strategy()`: environment + config -> a Keras-safe tf.distribute strategy."""

from __future__ import annotations

import dataclasses
import os
import warnings
from typing import Any, Mapping, Sequence

import tensorflow as tf

from tfdist_opt import _logging
from tfdist_opt import versions
from tfdist_opt.strategy import file_writers
from tfdist_opt.strategy import keras_steps
from tfdist_opt.strategy import kinds
from tfdist_opt.strategy import plan as plan_lib
from tfdist_opt.strategy import topology as topology_lib
from tfdist_opt.strategy.config import StrategyConfig
from tfdist_opt.gradients import keras_binding as gradient_binding
from tfdist_opt.gradients.options import GradientOptions

# collective_streams="auto": two pieces in flight kept a 1 Gbit/s link
# busiest in the link-speed benchmark (more did not help).
AUTO_STREAMS = 2


def resolve_config(
    config: StrategyConfig | str | os.PathLike | None = None,
    environ: Mapping[str, str] | None = None,
    **overrides: Any,
) -> StrategyConfig:
    """The effective config: a given `StrategyConfig` + overrides, or
    defaults < file (`config` path) < `TFDIST_OPT_*` env < overrides."""
    if isinstance(config, StrategyConfig):
        explicit = {k: v for k, v in overrides.items() if v is not None}
        return config.replace(**explicit) if explicit else config
    return StrategyConfig.load(config, environ=environ, **overrides)


def opt_strategy(
    config: StrategyConfig | str | os.PathLike | None = None,
    *,
    gradient_stages: Sequence = (),
    **overrides: Any,
) -> tf.distribute.Strategy:
    """Builds the fastest correct `tf.distribute` strategy for this process.

    Reads TF_CONFIG and the visible GPUs, merges `config` (a
    `StrategyConfig`, or a JSON/TOML path / preset name) with `TFDIST_OPT_*`
    environment variables and `overrides`, decides (see
    `tfdist_opt.strategy.plan.plan_strategy`), configures devices and returns the
    strategy. Call it at program start, before any other TensorFlow op:
    virtual CPU devices and multi-worker collectives must be configured
    before TF initialises its runtime.

    In a TF_CONFIG cluster with `ps` tasks (or with
    `mode="parameter_server"`) it builds the parameter-server kind: on the
    chief it returns a
    `tfdist_opt.parameter_server.KerasParameterServerStrategy`; on a
    `worker` or `ps` task it does not return: the process serves (a TF
    server) until the chief finishes, then exits with status 0 (1 if the
    chief never appeared within `startup_timeout_s`), so one script runs on
    every task.

    Args:
        config: `StrategyConfig`, str path / preset name, or None.
        gradient_stages: list of `tfdist_opt.gradients.GradientStage`.
            Stages the gradient path runs besides the ones `compression`,
            `grad_accum`, `bytes_per_pack` and `shard_optimizer_state`
            make, placed by their `position` and checked by
            `tfdist_opt.gradients.combine` before anything is built. Python
            objects, so an argument here, not a `StrategyConfig` field (a
            config file or environment variable cannot hold one).
            Defaults to `()`.
        **overrides: `StrategyConfig` fields, e.g. `all_reduce="ring"`.

    Returns:
        `tfdist_opt.strategy.keras_compat.KerasOneDeviceStrategy`,
        `KerasMirroredStrategy` (subclasses of `tf.distribute`'s
        `OneDeviceStrategy` and `MirroredStrategy` whose models get
        `keras_steps.KerasSteps`), `tfdist_opt.KerasMultiWorkerMirroredStrategy`,
        or, on a parameter-server chief,
        `tfdist_opt.parameter_server.KerasParameterServerStrategy`.

    Raises:
        ValueError: bad config value, or a request this host cannot satisfy.
        RuntimeError: TF's runtime was initialised before devices could be
            configured.

    Example:
        >>> strategy = opt_strategy(cpu_replicas=2)  # doctest: +SKIP
        >>> with strategy.scope():
        ...     model = keras.Sequential([keras.layers.Dense(1)])
        ...     model.compile("sgd", "mse")
    """
    cfg = resolve_config(config, **overrides)
    # Checked here, before any device is configured (raises on bad stages).
    options = GradientOptions.from_config(cfg, stages=_stage_list(gradient_stages))
    topo = topology_lib.detect_topology()
    plan = plan_lib.plan_strategy(cfg, topo)
    return build_strategy(cfg, plan, topo, gradient_stages=options.stages)


def build_strategy(
    cfg: StrategyConfig,
    plan: plan_lib.StrategyPlan,
    topo: topology_lib.Topology,
    gradient_stages: Sequence = (),
) -> tf.distribute.Strategy:
    """Turns a plan into TF objects (devices first, then the kind's strategy)."""
    _check_keras_flavour(cfg, gradient_stages)
    for message in plan.warnings:
        warnings.warn(message, stacklevel=3)
    _configure_devices(cfg, plan)
    _configure_numerics(cfg)
    strategy = kinds.module(plan.kind).build(cfg, plan, topo)
    # Packing ("auto"), compression and accumulation: Keras 3 optimizers
    # created in this strategy's scope pick these up (tfdist_opt.gradients).
    gradient_binding.attach(
        strategy, gradient_options(cfg, plan.kind, gradient_stages, plan.all_reduce)
    )
    # Who writes saved files, per directory (tfdist_opt.strategy.file_writers).
    file_writers.attach(strategy, cfg.storage_sharing)
    # What a model's jit_compile=True step does where XLA cannot compile it.
    keras_steps.set_jit_fallback(strategy, cfg.jit_fallback)
    _logging.log_once(
        f"tfdist_opt: built {type(strategy).__name__} with "
        f"{strategy.num_replicas_in_sync} replica(s): {plan.describe()}. "
        f"{topo.describe()}"
    )
    return strategy


def gradient_options(
    cfg: StrategyConfig, kind, stages: Sequence = (), all_reduce: str | None = "ring"
) -> GradientOptions:
    """The `GradientOptions` a strategy of `kind` attaches.

    Multi-worker with Keras 3: `hooked`, even at the defaults, so that the
    gradients and Keras's logs travel together and the optimizer's update
    is fused; with RING (`all_reduce`) the gradients travel as streamed
    pieces (`collective_streams`, "auto": 2), the same sum of the same
    float32 values. With `TF_USE_LEGACY_KERAS=1` nothing is hooked.
    """
    options = GradientOptions.from_config(cfg, stages=stages)
    if kinds.Kind(kind) == kinds.Kind.MULTI_WORKER and not versions.uses_legacy_keras():
        options = dataclasses.replace(
            options,
            hooked=True,
            collective_streams=collective_streams(cfg, all_reduce),
        )
    return options


def collective_streams(cfg: StrategyConfig, all_reduce: str | None) -> int:
    """`cfg.collective_streams` resolved for a multi-worker Keras 3 strategy.

    `"auto"` is `AUTO_STREAMS` where the plain all-reduce of a step's
    gradients runs in the replica context: RING, no packs of the user's
    (`bytes_per_pack=0`), and none of PowerSGD (its own factor
    collectives), `grad_accum > 1` (one cross-replica all-reduce every k
    steps) or `shard_optimizer_state` (reduce-scatter and gather).
    """
    if all_reduce != "ring":
        return 0  # NCCL keeps its launcher's order (a plan warning says so when asked)
    if cfg.collective_streams != "auto":
        return cfg.collective_streams
    applies = cfg.bytes_per_pack == 0 and not plan_lib.streams_bypassed(cfg)
    return AUTO_STREAMS if applies else 0


def _stage_list(stages) -> tuple:
    from tfdist_opt.gradients.stage import GradientStage

    if isinstance(stages, (list, tuple)) and all(isinstance(s, GradientStage) for s in stages):
        return tuple(stages)
    raise TypeError(
        "Invalid value for `gradient_stages`: expected a list or tuple of "
        f"tfdist_opt.gradients.GradientStage instances. Received: gradient_stages={stages!r}"
    )


def _check_keras_flavour(cfg: StrategyConfig, gradient_stages: Sequence = ()) -> None:
    """The gradient hooks exist for Keras 3 only: refuse, never ignore."""
    if not versions.uses_legacy_keras():
        return
    keras3_only = {
        "gradient_stages": (tuple(gradient_stages), ()),
        "grad_accum": (cfg.grad_accum, 1),
        "compression": (cfg.compression, "none"),
        "shard_optimizer_state": (cfg.shard_optimizer_state, False),
    }
    if cfg.bytes_per_pack == "auto":
        keras3_only["bytes_per_pack"] = (cfg.bytes_per_pack, "an int")
    for name, (value, off) in keras3_only.items():
        if value != off:
            raise ValueError(
                f"Invalid value for `{name}` with tf_keras (TF_USE_LEGACY_KERAS=1): "
                f"tfdist_opt's gradient path hooks Keras 3 optimizers only. "
                f"Received: {name}={value!r}. Expected {name}={off!r}, or "
                "unset TF_USE_LEGACY_KERAS."
            )


def _configure_devices(cfg: StrategyConfig, plan: plan_lib.StrategyPlan) -> None:
    gpus = tf.config.list_physical_devices("GPU")
    if plan.gpu_memory_growth:  # the plan's policy (plan.gpu_memory_choice)
        for gpu in gpus:
            try:
                tf.config.experimental.set_memory_growth(gpu, True)
            except RuntimeError:
                if not tf.config.experimental.get_memory_growth(gpu):
                    warnings.warn(
                        "gpu_memory_growth=True could not be applied: TF's "
                        "runtime is already initialised",
                        stacklevel=4,
                    )
    if plan.cpu_replicas > 1:
        cpu = tf.config.list_physical_devices("CPU")[0]
        wanted = [tf.config.LogicalDeviceConfiguration()] * plan.cpu_replicas
        try:
            tf.config.set_logical_device_configuration(cpu, wanted)
        except RuntimeError as e:
            have = len(tf.config.list_logical_devices("CPU"))
            if have < plan.cpu_replicas:
                raise RuntimeError(
                    f"cpu_replicas={plan.cpu_replicas} needs virtual CPU devices, "
                    f"but TF's runtime is already initialised with {have}. Call "
                    "opt_strategy() before any other TensorFlow op."
                ) from e


def _configure_numerics(cfg: StrategyConfig) -> None:
    if cfg.mixed_precision != "off":
        tf.keras.mixed_precision.set_global_policy(cfg.mixed_precision)
    if cfg.jit_compile:
        tf.config.optimizer.set_jit(True)
