"""`opt_strategy()`: environment + config -> a Keras-safe tf.distribute strategy."""

from __future__ import annotations

import os
import warnings
from typing import Any, Mapping, Sequence

import tensorflow as tf

from tfdist_opt import _logging
from tfdist_opt.strategy.saving import file_writers
from tfdist_opt.keras import keras_steps
from tfdist_opt.strategy import kinds
from tfdist_opt.strategy import plan as plan_lib
from tfdist_opt.strategy import topology as topology_lib
from tfdist_opt.strategy.config import StrategyConfig
from tfdist_opt.gradients.binding import keras_binding as gradient_binding
from tfdist_opt.gradients.options import GradientOptions


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
            `tfdist_opt.gradients.stages.combine` before anything is built. Python
            objects, so an argument here, not a `StrategyConfig` field (a
            config file or environment variable cannot hold one).
            Defaults to `()`.
        **overrides: `StrategyConfig` fields, e.g. `all_reduce="ring"`.

    Returns:
        `tfdist_opt.keras.keras_compat.KerasOneDeviceStrategy`,
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
    # Checked before anything is read or built (raises on bad stages).
    gradients = GradientOptions.from_config(cfg, stages=_stage_list(gradient_stages))
    topo = topology_lib.detect_topology()
    # The whole decision, the gradient path included (refusals under tf_keras).
    plan = plan_lib.plan_strategy(cfg, topo, gradients=gradients)
    return build_strategy(cfg, plan, topo)


def build_strategy(
    cfg: StrategyConfig,
    plan: plan_lib.StrategyPlan,
    topo: topology_lib.Topology,
) -> tf.distribute.Strategy:
    """Turns a plan into TF objects (devices first, then the kind's strategy)."""
    for message in plan.warnings:
        warnings.warn(message, stacklevel=3)
    _configure_devices(cfg, plan)
    _configure_numerics(cfg)
    strategy = kinds.module(plan.kind).build(cfg, plan, topo)
    # The gradient path (`plan.gradients`): Keras 3 optimizers created in
    # this strategy's scope run it (tfdist_opt.gradients).
    gradient_binding.attach(strategy, plan.gradients)
    # Who writes saved files, per directory (tfdist_opt.strategy.saving.file_writers).
    file_writers.attach(strategy, cfg.storage_sharing)
    # What a model's jit_compile=True step does where XLA cannot compile it.
    keras_steps.set_jit_fallback(strategy, cfg.jit_fallback)
    _logging.log_once(
        f"tfdist_opt: built {type(strategy).__name__} with "
        f"{strategy.num_replicas_in_sync} replica(s): {plan.describe()}. "
        f"{topo.describe()}"
    )
    return strategy


def _stage_list(stages) -> tuple:
    from tfdist_opt.gradients.stages.stage import GradientStage

    if isinstance(stages, (list, tuple)) and all(isinstance(s, GradientStage) for s in stages):
        return tuple(stages)
    raise TypeError(
        "Invalid value for `gradient_stages`: expected a list or tuple of "
        f"tfdist_opt.gradients.GradientStage instances. Received: gradient_stages={stages!r}"
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
