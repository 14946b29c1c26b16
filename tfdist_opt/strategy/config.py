"""`StrategyConfig`: one validated, frozen description of how to distribute.

Pure Python: importing this module does not import TensorFlow.

Sources and precedence (later wins), the same everywhere in tfdist_opt:

1. built-in defaults (the dataclass field defaults below);
2. a config file, JSON or TOML (`configs/*.json|toml`, or any path);
3. `TFDIST_OPT_<FIELD>` environment variables (e.g. `TFDIST_OPT_ALL_REDUCE=ring`);
4. explicit keyword arguments (or absl flags turned into keywords by a binary).

`TFDIST_OPT_CONFIG=path` names a config file when none is passed explicitly.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Mapping

from tfdist_opt import config_files
from tfdist_opt import validation
from tfdist_opt.gradients.powersgd import powersgd
from tfdist_opt.gradients import options as gradient_options
from tfdist_opt.strategy.devices import cpu_split
from tfdist_opt.keras import keras_steps
from tfdist_opt.strategy import kind_names
from tfdist_opt.strategy.saving import storage_sharing

ENV_PREFIX = config_files.ENV_PREFIX
CONFIG_FILE_ENV = config_files.CONFIG_FILE_ENV
DATA_ENV_PREFIX = ENV_PREFIX + "DATA_"

MODES = ("auto",) + kind_names.names()
ALL_REDUCE = ("auto", "nccl", "ring", "hierarchical_copy", "reduce_to_one")
MIXED_PRECISION = ("off", "mixed_float16", "mixed_bfloat16")
COMPRESSION = gradient_options.COMPRESSIONS
# The gradient settings' defaults are `GradientOptions`'s, defined once there.
_GRADIENTS = gradient_options.GradientOptions()
STORAGE_SHARING = storage_sharing.MODES
CPU_SPLIT = cpu_split.MODES
JIT_FALLBACKS = keras_steps.JIT_FALLBACKS


@dataclasses.dataclass(frozen=True)
class StrategyConfig(validation.ConfigFields):
    """How `opt_strategy()` should build and tune a `tf.distribute` strategy.

    Every field is validated on construction; a bad value raises a
    `ValueError` (or `TypeError` for a wrong type) naming the field, the
    value received and what is allowed.

    Args:
        mode: str. `"auto"` (decide from TF_CONFIG and devices),
            `"one_device"`, `"mirrored"`, `"multi_worker"` or
            `"parameter_server"`.
            Defaults to `"auto"`.
        all_reduce: str. Cross-replica reduction: `"auto"` (NCCL on GPUs;
            without GPUs, RING across workers and `"reduce_to_one"` among
            one host's replicas; `"hierarchical_copy"` where GPUs were split
            into logical devices), `"nccl"`, `"ring"`, `"hierarchical_copy"`
            or `"reduce_to_one"`. Defaults to `"auto"`.
        bytes_per_pack: int or `"auto"`. Multi-worker gradient packing: pack
            size in bytes (0 lets TF decide) or `"auto"` for our policy.
            Defaults to `0`.
        collective_streams: int or `"auto"`. Multi-worker RING all-reduce
            of the gradients: n > 0 cuts each step's gradients into pieces
            of `collective_piece_bytes` in backprop order, up to n
            collectives in flight (`tfdist_opt.gradients.collectives.collectives`; the
            same sums); 0 runs TF's one collective per pack. `"auto"`: 2
            where it applies (multi-worker, RING, Keras 3,
            `bytes_per_pack=0`), else 0. Defaults to `"auto"`.
        collective_piece_bytes: int. Bytes per piece with
            `collective_streams`. Defaults to `2 MiB`.
        num_packs: int. Packs for single-host NCCL / hierarchical copy.
            Defaults to `1`.
        collective_timeout_s: float or None. Multi-worker `fit`: when a
            train step (its input there) has run this many seconds, the
            worker aborts its collectives and the step raises
            `DeadlineExceededError` instead of hanging on a stuck peer. Set
            it above the longest step (the first one traces). Checked by the
            stall inspector's one thread (needs `stall_warn_s`), not by TF's
            per-collective timeout, which starts one OS thread per
            collective that lives for the whole timeout. Custom training
            loops get no timeout. Defaults to `None` (none).
        cpu_replicas: int. Number of virtual CPU devices to create when no
            GPU is present (0 = off). Defaults to `0`.
        replicas: int or None. A replica count that stays fixed whatever
            the number of workers W: each worker runs `replicas / W`
            replicas on logical CPU devices, so a run resumed at another
            size (Ray's elastic mode, `tfdist-opt launch --ray -n MIN:MAX`) keeps
            the per-replica batch, each replica's examples and per-replica
            optimizer state (PowerSGD residuals, ZeRO shards, `grad_accum`
            accumulators): the same math. Must be a multiple of W; CPU hosts
            only; not with parameter servers or `cpu_replicas`. With W <
            `replicas` each worker computes several replicas' work. See
            `tfdist_opt.strategy.devices.virtual_replicas`. Defaults to `None` (one
            replica per worker, or per local device).
        gpu_memory_growth: bool. Enable memory growth on every GPU, except
            GPUs split into logical devices (TF refuses it there).
            Defaults to `True`.
        mixed_precision: str. `"off"`, `"mixed_float16"` or
            `"mixed_bfloat16"` (sets the Keras global dtype policy).
            Defaults to `"off"`.
        jit_compile: bool. Turn on XLA auto-clustering for the process.
            Defaults to `False`.
        compression: str. Gradient compression for the all-reduce:
            `"none"`, `"fp16"`, `"bf16"` or `"powersgd"` (low-rank factors
            with error feedback, `powersgd_*` below) or `"auto"`: in the
            first steps of Keras `fit`, multi-worker, the link's all-reduce
            rate and the step are measured and none, bf16 or PowerSGD is
            picked by the predicted step time; the chief prints the choice,
            marked LOSSY when it is, and why (one host: `"none"`).
            Defaults to `"none"`.
        grad_accum: int. Micro-batches accumulated before each all-reduce
            and optimizer step. Defaults to `1` (off).
        startup_timeout_s: float or None. Multi-worker: how long to wait for
            every peer to join before exiting with a message naming the
            missing tasks (TF's own default is one hour). None waits
            forever. Defaults to `300`.
        tune_malloc: bool. Multi-worker: raise glibc's mmap/trim thresholds
            so collective receive buffers are reused instead of page-faulted
            in every step (see `tfdist_opt.strategy.devices.host_memory`). Defaults to `True`.
        ps_min_shard_bytes: int. Parameter-server kind: a variable is cut
            into shards of at least this many bytes (so only variables of
            twice this size or more are sharded). Defaults to `262144`.
        ps_max_shards: int. Parameter-server kind: the most shards per
            variable; `0` means one per ps task, `1` turns sharding off.
            Defaults to `0`.
        storage_sharing: str. Multi-worker saving: who writes a file.
            `"auto"`: per directory, from evidence (a probe file each
            worker writes and the others look for): one writer per storage
            that workers share, and each worker on a disk of its own keeps
            its own copy. `"shared"`: every worker sees the same storage,
            only the chief writes (no probe). `"per_worker"`: every worker
            writes its own copy (no probe). Defaults to `"auto"`.
        powersgd_rank: int. `compression="powersgd"`: rank R of the
            low-rank factors P (rows x R) and Q (cols x R) sent instead of
            each selected gradient matrix. Defaults to `4`.
        powersgd_start_step: int. Updates all-reduced uncompressed before
            PowerSGD starts (early training is the most sensitive to
            compression error). Defaults to `100`.
        powersgd_min_compression: float. Compress a matrix only when its
            rank-R factors are at least this many times smaller than it;
            `0` compresses every matrix. Defaults to `2.0`.
        powersgd_wire: str. `"none"`, `"bf16"` or `"fp16"`: dtype of the
            factors (and of the uncompressed rest) on the wire. Defaults
            to `"none"` (float32).
        shard_optimizer_state: bool. ZeRO stage 1: every Keras 3 optimizer
            created in the scope keeps 1/n of each slot (Adam's m and v,
            momentum, ...) per replica; the full state is saved in
            checkpoints. Mirrored and multi-worker kinds with Keras 3 only;
            not with `compression="powersgd"` or `grad_accum > 1`.
            Defaults to `False`.
        shard_bucket_bytes: int. With `shard_optimizer_state`: the step
            runs one bucket of at most this many gradient bytes at a time
            (reduce-scatter, update, gather, write), which bounds its
            transient memory; `0`: one bucket per dtype. Defaults to
            `8 MiB`.
        cpu_split: str. Multi-worker: when several training tasks run on
            one host, `"auto"` (= `"threads"`) sizes each task's TF thread
            pools to its share of the CPUs (CPUs / tasks), unpinned;
            `"pin"` also pins each to its own equal slice of the host's
            CPUs (left alone when something already restricted the
            process's CPUs); `"off"` keeps TF's defaults (every task's
            pools sized to every CPU). See `tfdist_opt.strategy.devices.cpu_split`.
            Defaults to `"auto"`.
        fused_updates: bool. Where tfdist_opt's gradient path hooks the
            optimizer (any of `compression`, `grad_accum > 1`,
            `bytes_per_pack="auto"`, `shard_optimizer_state`, and every
            multi-worker strategy with Keras 3), Keras's own
            SGD and Adam steps run as one fused TF kernel per variable
            (`tfdist_opt.gradients.binding.fused_updates`). Defaults to `True`.
        jit_fallback: str. A Keras model compiled with `jit_compile=True`
            runs each replica's step under XLA (`tfdist_opt.keras.keras_steps`);
            when a step cannot be compiled per replica (it runs a
            cross-replica collective before the optimizer, e.g. synchronized
            BatchNormalization), `"warn"` emits one `XlaFallbackWarning`
            naming the stage and the op and runs that stage without XLA;
            `"error"` raises `UnsupportedCombinationError` before any step.
            Defaults to `"warn"`.
        stall_warn_s: float or None. Multi-worker `fit`: when one worker
            has not advanced (step and phase: input, step, callbacks,
            saving) for this many seconds while the others wait for it, the
            chief prints one message naming it, where it is, for how long,
            who waits where, and its Python stack; repeated at most every
            `stall_warn_s` (`tfdist_opt.stall`). `None` or `0` turns the
            stall inspector off. Defaults to `60` (Horovod's
            `HOROVOD_STALL_CHECK_TIME_SECONDS`).
        stall_abort_s: float or None. Multi-worker `fit`: after a stall of
            this many seconds every worker exits with code
            `tfdist_opt.stall.STALL_EXIT_CODE` (43) and a message naming the
            stall, so `tfdist-opt launch --max-restarts R` restarts the job
            (it resumes from the newest backup). Needs the inspector on and
            a value >= `stall_warn_s`. `None` or `0`: never abort (a stall
            may be a long but legitimate wait). Defaults to `None`.
    """

    mode: str = "auto"
    all_reduce: str = "auto"
    bytes_per_pack: int | str = _GRADIENTS.bytes_per_pack
    collective_streams: int | str = "auto"
    collective_piece_bytes: int = _GRADIENTS.collective_piece_bytes
    num_packs: int = 1
    collective_timeout_s: float | None = None
    cpu_replicas: int = 0
    replicas: int | None = None
    gpu_memory_growth: bool = True
    mixed_precision: str = "off"
    jit_compile: bool = False
    compression: str = _GRADIENTS.compression
    grad_accum: int = _GRADIENTS.grad_accum
    startup_timeout_s: float | None = 300.0
    tune_malloc: bool = True
    ps_min_shard_bytes: int = 256 << 10
    ps_max_shards: int = 0
    storage_sharing: str = "auto"
    powersgd_rank: int = _GRADIENTS.powersgd_rank
    powersgd_start_step: int = _GRADIENTS.powersgd_start_step
    powersgd_min_compression: float = _GRADIENTS.powersgd_min_compression
    powersgd_wire: str = _GRADIENTS.powersgd_wire
    shard_optimizer_state: bool = _GRADIENTS.shard_optimizer_state
    shard_bucket_bytes: int = _GRADIENTS.shard_bucket_bytes
    cpu_split: str = "auto"
    fused_updates: bool = _GRADIENTS.fused_updates
    jit_fallback: str = "warn"
    stall_warn_s: float | None = 60.0
    stall_abort_s: float | None = None

    def __post_init__(self):
        validation.check_choice("mode", self.mode, MODES)
        validation.check_choice("all_reduce", self.all_reduce, ALL_REDUCE)
        if self.bytes_per_pack != "auto":
            validation.check_int(
                "bytes_per_pack",
                self.bytes_per_pack,
                minimum=0,
                expected='a non-negative int or "auto"',
            )
        validation.check_int_or("collective_streams", self.collective_streams, "auto", 0)
        validation.check_int("collective_piece_bytes", self.collective_piece_bytes, minimum=1)
        if self.collective_streams not in ("auto", 0) and self.bytes_per_pack != 0:
            raise ValueError(
                "Invalid value for `collective_streams` with `bytes_per_pack` "
                "set: streamed pieces replace the packs. Received: "
                f"collective_streams={self.collective_streams!r}, "
                f"bytes_per_pack={self.bytes_per_pack!r}. Expected "
                "collective_streams=0 or 'auto', or bytes_per_pack=0."
            )
        validation.check_int("num_packs", self.num_packs, minimum=1)
        if self.collective_timeout_s is not None:
            _check_number("collective_timeout_s", self.collective_timeout_s)
        validation.check_int("cpu_replicas", self.cpu_replicas, minimum=0)
        if self.replicas is not None:
            validation.check_int(
                "replicas", self.replicas, minimum=1, expected="a positive int or None"
            )
            if self.cpu_replicas:
                raise ValueError(
                    "Invalid value for `cpu_replicas` with `replicas` set: "
                    "replicas decides the local devices (replicas / workers "
                    f"logical CPUs each). Received: cpu_replicas={self.cpu_replicas}, "
                    f"replicas={self.replicas}. Expected cpu_replicas=0, or "
                    "replicas=None."
                )
        validation.check_bool("gpu_memory_growth", self.gpu_memory_growth)
        validation.check_choice("mixed_precision", self.mixed_precision, MIXED_PRECISION)
        validation.check_bool("jit_compile", self.jit_compile)
        validation.check_choice("compression", self.compression, COMPRESSION)
        validation.check_int("grad_accum", self.grad_accum, minimum=1)
        if self.startup_timeout_s is not None:
            _check_number("startup_timeout_s", self.startup_timeout_s)
        validation.check_bool("tune_malloc", self.tune_malloc)
        validation.check_int("ps_min_shard_bytes", self.ps_min_shard_bytes, minimum=1)
        validation.check_int("ps_max_shards", self.ps_max_shards, minimum=0)
        validation.check_choice("storage_sharing", self.storage_sharing, STORAGE_SHARING)
        powersgd.check_settings(
            self.powersgd_rank,
            self.powersgd_start_step,
            self.powersgd_min_compression,
            self.powersgd_wire,
        )
        validation.check_bool("shard_optimizer_state", self.shard_optimizer_state)
        validation.check_int("shard_bucket_bytes", self.shard_bucket_bytes, minimum=0)
        validation.check_choice("cpu_split", self.cpu_split, CPU_SPLIT)
        validation.check_bool("fused_updates", self.fused_updates)
        validation.check_choice("jit_fallback", self.jit_fallback, JIT_FALLBACKS)
        # The gradient settings' combination rules: the chain's
        # (`GradientOptions` checks them; e.g. ZeRO with PowerSGD).
        gradient_options.GradientOptions.from_config(self)
        _check_stall(self.stall_warn_s, self.stall_abort_s)
        if self.collective_timeout_s and not self.stall_warn_s:
            raise ValueError(
                "Invalid value for `collective_timeout_s`: the timeout is checked "
                "by the stall inspector's thread, and stall_warn_s="
                f"{self.stall_warn_s!r} turns it off. Received: collective_timeout_s="
                f"{self.collective_timeout_s!r}. Expected collective_timeout_s=None, "
                "or a positive stall_warn_s."
            )

    # ------------------------------------------------------------ loading
    @classmethod
    def from_file(cls, path: str | os.PathLike) -> "StrategyConfig":
        """Loads a JSON or TOML file (or a preset name from `configs/`)."""
        return cls.from_dict(read_config_file(path), source=f"config file {path}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "StrategyConfig":
        """Builds a config from `TFDIST_OPT_*` variables over the defaults."""
        environ = os.environ if environ is None else environ
        return cls.load(environ={k: v for k, v in environ.items() if k != CONFIG_FILE_ENV})

    @classmethod
    def load(
        cls,
        path: str | os.PathLike | None = None,
        environ: Mapping[str, str] | None = None,
        **overrides: Any,
    ) -> "StrategyConfig":
        """Merges defaults < file < environment < keyword overrides.

        Args:
            path: str or None. Config file or preset name. Defaults to
                `$TFDIST_OPT_CONFIG`, or no file.
            environ: mapping or None. Environment to read. Defaults to
                `os.environ`.
            **overrides: explicit field values; `None` values are ignored
                so absl flags left unset do not override anything.

        Returns:
            A validated `StrategyConfig`.

        Raises:
            ValueError: a field has a bad value (naming where it was set),
                or an unknown field is set.

        Example:
            >>> StrategyConfig.load(environ={}, all_reduce="ring").all_reduce
            'ring'
        """
        return config_files.load(
            cls,
            path,
            environ,
            overrides,
            section="strategy",
            prefix=ENV_PREFIX,
            skip_prefixes=(DATA_ENV_PREFIX,),
        )


# ----------------------------------------------------------------- files
list_presets = config_files.list_presets
resolve_config_path = config_files.resolve_path


def read_config_file(path: str | os.PathLike) -> dict[str, Any]:
    """The `strategy` fields of a JSON or TOML config file (safe loaders only)."""
    return config_files.read_section(path, "strategy")


def env_overrides(environ: Mapping[str, str]) -> dict[str, Any]:
    """Parses `TFDIST_OPT_<FIELD>` variables into typed field values."""
    return {
        name: value
        for name, (_, value) in config_files.env_values(
            StrategyConfig, environ, ENV_PREFIX, (DATA_ENV_PREFIX,)
        ).items()
    }


# ------------------------------------------------------------ validation
def _check_number(name: str, value: Any) -> None:
    validation.check_number(name, value, expected="a positive number of seconds or None")


def _check_stall(warn_s: Any, abort_s: Any) -> None:
    expected = "a positive number of seconds, or 0 or None (off)"
    for name, value in (("stall_warn_s", warn_s), ("stall_abort_s", abort_s)):
        if value is not None:
            validation.check_number(name, value, allow_zero=True, expected=expected)
    if abort_s and not warn_s:
        raise ValueError(
            "Invalid value for `stall_abort_s`: the abort needs the stall "
            f"inspector, and stall_warn_s={warn_s!r} turns it off. Received: "
            f"stall_abort_s={abort_s!r}. Expected stall_abort_s=None, or a "
            "positive stall_warn_s <= stall_abort_s."
        )
    if abort_s and abort_s < warn_s:
        raise ValueError(
            "Invalid value for `stall_abort_s`: expected a number of seconds "
            f">= stall_warn_s ({warn_s:g}), or 0 or None (off). Received: "
            f"stall_abort_s={abort_s!r}"
        )
