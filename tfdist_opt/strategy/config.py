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
import json
import os
import pathlib
import tomllib
from typing import Any, Mapping

from tfdist_opt import validation
from tfdist_opt.strategy import kinds

ENV_PREFIX = "TFDIST_OPT_"
CONFIG_FILE_ENV = ENV_PREFIX + "CONFIG"

MODES = ("auto",) + kinds.names()
ALL_REDUCE = ("auto", "nccl", "ring", "hierarchical_copy", "reduce_to_one")
MIXED_PRECISION = ("off", "mixed_float16", "mixed_bfloat16")
COMPRESSION = ("none", "fp16", "bf16")

# configs/ beside the package (source checkout / editable install).
PRESETS_DIR = pathlib.Path(__file__).resolve().parents[2] / "configs"


@dataclasses.dataclass(frozen=True)
class StrategyConfig(validation.ConfigFields):
    """How `opt_strategy()` should build and tune a `tf.distribute` strategy.

    Every field is validated on construction; a bad value raises a
    `ValueError` (or `TypeError` for a wrong type) naming the field, the
    value received and what is allowed.

    Args:
        mode: str. `"auto"` (decide from TF_CONFIG and devices),
            `"one_device"`, `"mirrored"` or `"multi_worker"`.
            Defaults to `"auto"`.
        all_reduce: str. Cross-replica reduction: `"auto"` (NCCL on GPUs,
            RING otherwise), `"nccl"`, `"ring"`, `"hierarchical_copy"` or
            `"reduce_to_one"`. Defaults to `"auto"`.
        bytes_per_pack: int or `"auto"`. Multi-worker gradient packing: pack
            size in bytes (0 lets TF decide) or `"auto"` for our policy.
            Defaults to `0`.
        num_packs: int. Packs for single-host NCCL / hierarchical copy.
            Defaults to `1`.
        collective_timeout_s: float or None. Per-collective timeout in
            seconds; a stuck peer raises `DeadlineExceededError` instead of
            hanging. Defaults to `None` (TF's: none).
        cpu_replicas: int. Number of virtual CPU devices to create when no
            GPU is present (0 = off). Defaults to `0`.
        gpu_memory_growth: bool. Enable memory growth on every GPU.
            Defaults to `True`.
        mixed_precision: str. `"off"`, `"mixed_float16"` or
            `"mixed_bfloat16"` (sets the Keras global dtype policy).
            Defaults to `"off"`.
        jit_compile: bool. Turn on XLA auto-clustering for the process.
            Defaults to `False`.
        compression: str. Gradient compression for the all-reduce:
            `"none"`, `"fp16"` or `"bf16"`. Defaults to `"none"`.
        grad_accum: int. Micro-batches accumulated before each all-reduce
            and optimizer step. Defaults to `1` (off).
        startup_timeout_s: float or None. Multi-worker: how long to wait for
            every peer to join before exiting with a message naming the
            missing tasks (TF's own default is one hour). None waits
            forever. Defaults to `300`.
        tune_malloc: bool. Multi-worker: raise glibc's mmap/trim thresholds
            so collective receive buffers are reused instead of page-faulted
            in every step (see `tfdist_opt.strategy.host_memory`). Defaults to `True`.
        ps_min_shard_bytes: int. Parameter-server kind: a variable is cut
            into shards of at least this many bytes (so only variables of
            twice this size or more are sharded). Defaults to `262144`.
        ps_max_shards: int. Parameter-server kind: the most shards per
            variable; `0` means one per ps task, `1` turns sharding off.
            Defaults to `0`.
    """

    mode: str = "auto"
    all_reduce: str = "auto"
    bytes_per_pack: int | str = 0
    num_packs: int = 1
    collective_timeout_s: float | None = None
    cpu_replicas: int = 0
    gpu_memory_growth: bool = True
    mixed_precision: str = "off"
    jit_compile: bool = False
    compression: str = "none"
    grad_accum: int = 1
    startup_timeout_s: float | None = 300.0
    tune_malloc: bool = True
    ps_min_shard_bytes: int = 256 << 10
    ps_max_shards: int = 0

    def __post_init__(self):
        validation.check_choice("mode", self.mode, MODES)
        validation.check_choice("all_reduce", self.all_reduce, ALL_REDUCE)
        if self.bytes_per_pack != "auto":
            validation.check_int("bytes_per_pack", self.bytes_per_pack, minimum=0,
                       expected='a non-negative int or "auto"')
        validation.check_int("num_packs", self.num_packs, minimum=1)
        if self.collective_timeout_s is not None:
            _check_number("collective_timeout_s", self.collective_timeout_s)
        validation.check_int("cpu_replicas", self.cpu_replicas, minimum=0)
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

    # ------------------------------------------------------------ loading
    @classmethod
    def from_file(cls, path: str | os.PathLike) -> "StrategyConfig":
        """Loads a JSON or TOML file (or a preset name from `configs/`)."""
        return cls.from_dict(read_config_file(path), source=f"config file {path}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None
                 ) -> "StrategyConfig":
        """Builds a config from `TFDIST_OPT_*` variables over the defaults."""
        return cls(**env_overrides(os.environ if environ is None else environ))

    @classmethod
    def load(cls, path: str | os.PathLike | None = None,
             environ: Mapping[str, str] | None = None,
             **overrides: Any) -> "StrategyConfig":
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
            ValueError: a field has a bad value, or an unknown field is set.

        Example:
            >>> StrategyConfig.load(environ={}, all_reduce="ring").all_reduce
            'ring'
        """
        environ = os.environ if environ is None else environ
        merged: dict[str, Any] = {}
        path = path if path is not None else environ.get(CONFIG_FILE_ENV) or None
        if path is not None:
            file_values = read_config_file(path)
            cls.check_keys(file_values, f"config file {path}")
            merged.update(file_values)
        merged.update(env_overrides(environ))
        explicit = {k: v for k, v in overrides.items() if v is not None}
        cls.check_keys(explicit, "keyword arguments")
        merged.update(explicit)
        return cls(**merged)


# ----------------------------------------------------------------- files
def list_presets() -> list[pathlib.Path]:
    """Preset files shipped in `configs/` (sorted)."""
    if not PRESETS_DIR.is_dir():
        return []
    return sorted(p for p in PRESETS_DIR.iterdir()
                  if p.suffix in (".json", ".toml"))


def resolve_config_path(path: str | os.PathLike) -> pathlib.Path:
    """A path as given, or a preset name (`cpu_test`) found in `configs/`."""
    p = pathlib.Path(path)
    if p.is_file():
        return p
    for candidate in (PRESETS_DIR / p, PRESETS_DIR / (str(p) + ".json"),
                      PRESETS_DIR / (str(p) + ".toml")):
        if candidate.is_file():
            return candidate
    names = ", ".join(q.stem for q in list_presets()) or "none"
    raise ValueError(
        f"Invalid config file: no such file or preset. Received: {path!s}. "
        f"Expected a .json/.toml path or a preset name ({names}).")


def read_config_file(path: str | os.PathLike) -> dict[str, Any]:
    """Parses a JSON or TOML config file with safe loaders only.

    A `[strategy]` table (TOML) or `"strategy"` object (JSON) is used when
    present, so one file can also hold other sections.
    """
    p = resolve_config_path(path)
    text = p.read_text()
    if p.suffix == ".toml":
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ValueError(f"Invalid config file {p}: not valid TOML ({e}).") from None
    elif p.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(
                f"Invalid config file {p}: not valid JSON ({e.msg} at line "
                f"{e.lineno} column {e.colno}).") from None
    else:
        raise ValueError(
            f"Invalid config file: unsupported extension. Received: {p}. "
            "Expected a .json or .toml file.")
    if not isinstance(data, dict):
        raise ValueError(
            f"Invalid config file {p}: expected a JSON object / TOML table at "
            f"top level. Received: {type(data).__name__}")
    if "strategy" in data:
        data = data["strategy"]
    # Documentation keys, and other sections of a shared file (`data` for
    # PipelineOptions), are not StrategyConfig fields.
    return {k: v for k, v in data.items() if not k.startswith("_")
            and k not in ("description", "data")}


# ----------------------------------------------------------- environment
def env_overrides(environ: Mapping[str, str]) -> dict[str, Any]:
    """Parses `TFDIST_OPT_<FIELD>` variables into typed field values."""
    known = {f.name: f for f in dataclasses.fields(StrategyConfig)}
    out: dict[str, Any] = {}
    for key, raw in environ.items():
        if not key.startswith(ENV_PREFIX) or key == CONFIG_FILE_ENV:
            continue
        name = key[len(ENV_PREFIX):].lower()
        if name not in known:
            raise ValueError(
                f"Unknown environment variable {key}={raw!r}. Expected one of: "
                + ", ".join(ENV_PREFIX + n.upper() for n in known)
                + f", {CONFIG_FILE_ENV}.")
        out[name] = _parse_env_value(key, name, raw)
    return out


_BOOL_WORDS = {"1": True, "true": True, "yes": True, "on": True,
               "0": False, "false": False, "no": False, "off": False}
_INT_FIELDS = ("num_packs", "cpu_replicas", "grad_accum", "ps_min_shard_bytes",
               "ps_max_shards")


def _parse_env_value(key: str, name: str, raw: str) -> Any:
    text = raw.strip()
    if name in ("gpu_memory_growth", "jit_compile", "tune_malloc"):
        if text.lower() not in _BOOL_WORDS:
            raise ValueError(
                f"Invalid value for `{name}` (from {key}): expected a boolean "
                f"(1/0, true/false, yes/no, on/off). Received: {key}={raw!r}")
        return _BOOL_WORDS[text.lower()]
    if name in _INT_FIELDS or (name == "bytes_per_pack" and text != "auto"):
        try:
            return int(text)
        except ValueError:
            raise ValueError(
                f"Invalid value for `{name}` (from {key}): expected an "
                f"integer. Received: {key}={raw!r}") from None
    if name in ("collective_timeout_s", "startup_timeout_s"):
        if text.lower() in ("", "none"):
            return None
        try:
            return float(text)
        except ValueError:
            raise ValueError(
                f"Invalid value for `{name}` (from {key}): expected a number "
                f"of seconds or 'none'. Received: {key}={raw!r}") from None
    return text


# ------------------------------------------------------------ validation
def _check_number(name: str, value: Any) -> None:
    validation.check_number(name, value,
                            expected="a positive number of seconds or None")
