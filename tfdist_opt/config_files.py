"""One way to load a config dataclass: file (or preset) < environment < keywords.

Used by `StrategyConfig` (section `strategy`, variables `TFDIST_OPT_<FIELD>`)
and `PipelineOptions` (section `data`, variables `TFDIST_OPT_DATA_<FIELD>`);
`TFDIST_OPT_CONFIG=path` names the file for both when none is given.

A file is JSON or TOML, read with safe loaders only (never evaluated). It
may hold several sections (`[strategy]`, `[data]`); keys outside any section
belong to `strategy`; keys starting with `_` and `description` are notes.
A path that is not a file is looked up among the presets (`configs/`) by
name, with or without its suffix.

Pure Python: no TensorFlow import.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
import tomllib
from typing import Any, Mapping

from tfdist_opt import resources

ENV_PREFIX = "TFDIST_OPT_"
CONFIG_FILE_ENV = ENV_PREFIX + "CONFIG"
# TFDIST_OPT_* variables that are not config fields (read elsewhere).
BENCHMARKS_DIR_ENV = ENV_PREFIX + "BENCHMARKS_DIR"  # tfdist-opt bench
NON_FIELD_ENVS = (CONFIG_FILE_ENV, BENCHMARKS_DIR_ENV)
SECTIONS = ("strategy", "data")
_NOTES = ("description",)
SUFFIXES = (".json", ".toml")

_BOOL_WORDS = {
    "1": True,
    "true": True,
    "yes": True,
    "on": True,
    "0": False,
    "false": False,
    "no": False,
    "off": False,
}


# --------------------------------------------------------------- presets
def presets_dir() -> pathlib.Path:
    """The folder of preset files: `configs/` of the source checkout, else
    the installed wheel's copy (`tfdist_opt/resources.py`); a path that does
    not exist when neither does."""
    return resources.data_dir("configs") or pathlib.Path(__file__).resolve().parents[1] / "configs"


def list_presets() -> list[pathlib.Path]:
    """Preset files, sorted."""
    d = presets_dir()
    if not d.is_dir():
        return []
    return sorted(p for p in d.iterdir() if p.suffix in SUFFIXES)


def resolve_path(path: str | os.PathLike) -> pathlib.Path:
    """A path as given, or a preset name (`cpu_test`, `cpu_test.json`)."""
    p = pathlib.Path(path)
    if p.is_file():
        return p
    d = presets_dir()
    for candidate in (d / p, *(d / (str(p) + s) for s in SUFFIXES)):
        if candidate.is_file():
            return candidate
    names = ", ".join(q.stem for q in list_presets()) or "none"
    raise ValueError(
        f"Invalid config file: no such file or preset. Received: {path!s}. "
        f"Expected a .json/.toml path or a preset name ({names})."
    )


# ------------------------------------------------------------------ files
def read_document(path: str | os.PathLike) -> tuple[pathlib.Path, dict[str, Any]]:
    """(resolved path, parsed top-level table) of a JSON or TOML file."""
    p = resolve_path(path)
    if p.suffix not in SUFFIXES:
        raise ValueError(
            f"Invalid config file: unsupported extension. Received: {p}. "
            "Expected a .json or .toml file."
        )
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(
            f"Invalid config file {p}: not UTF-8 text (byte {e.start}); "
            "expected a JSON or TOML file."
        ) from None
    except OSError as e:
        raise ValueError(f"Invalid config file {p}: cannot read it ({e.strerror}).") from None
    if p.suffix == ".toml":
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ValueError(f"Invalid config file {p}: not valid TOML ({e}).") from None
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(
                f"Invalid config file {p}: not valid JSON ({e.msg} at line "
                f"{e.lineno} column {e.colno})."
            ) from None
    if not isinstance(data, dict):
        raise ValueError(
            f"Invalid config file {p}: expected a JSON object / TOML table at "
            f"top level. Received: {type(data).__name__}"
        )
    return p, data


def read_section(path: str | os.PathLike, section: str) -> dict[str, Any]:
    """The `section` table of a config file (empty when absent).

    For `strategy`, keys outside any section are used when the file has no
    `strategy` table.
    """
    p, data = read_document(path)
    if section in data:
        values = data[section]
        if not isinstance(values, dict):
            raise ValueError(
                f"Invalid config file {p}: `{section}` must be a table / "
                f"object of fields. Received: {section}={values!r} "
                f"({type(values).__name__})"
            )
    elif section == SECTIONS[0]:
        values = {k: v for k, v in data.items() if k not in SECTIONS}
    else:
        values = {}
    return {k: v for k, v in values.items() if not k.startswith("_") and k not in _NOTES}


# ------------------------------------------------------------ environment
def env_values(
    cls, environ: Mapping[str, str], prefix: str, skip_prefixes: tuple[str, ...] = ()
) -> dict[str, tuple[str, Any]]:
    """`prefix<FIELD>` variables parsed by each field's type.

    Returns:
        {field: (variable name, typed value)}.

    Raises:
        ValueError: unknown variable under `prefix`, or a value that does not
            parse, naming the variable.
    """
    fields = {f.name: f for f in dataclasses.fields(cls)}
    out: dict[str, tuple[str, Any]] = {}
    for key, raw in environ.items():
        if not key.startswith(prefix) or key in NON_FIELD_ENVS or key.startswith(skip_prefixes):
            continue
        name = key[len(prefix) :].lower()
        if name not in fields:
            raise ValueError(
                f"Unknown environment variable {key}={raw!r}. Expected one of: "
                + ", ".join(prefix + n.upper() for n in fields)
                + f", {CONFIG_FILE_ENV}."
            )
        out[name] = (key, parse_env_value(key, name, raw, str(fields[name].type)))
    return out


def parse_env_value(key: str, name: str, raw: str, annotation: str) -> Any:
    """One variable's text as the field's type (`annotation`, e.g. `int | str`)."""
    text = raw.strip()
    types = set(re.findall(r"[A-Za-z_]+", annotation))
    if "None" in types and text.lower() in ("", "none"):
        return None
    if "bool" in types:
        if text.lower() in _BOOL_WORDS:
            return _BOOL_WORDS[text.lower()]
        raise ValueError(
            f"Invalid value for `{name}` (from {key}): expected a boolean "
            f"(1/0, true/false, yes/no, on/off). Received: {key}={raw!r}"
        )
    if "int" in types:
        try:
            return int(text)
        except ValueError:
            if "str" in types:
                return text
            raise ValueError(
                f"Invalid value for `{name}` (from {key}): expected an "
                f"integer. Received: {key}={raw!r}"
            ) from None
    if "float" in types:
        try:
            return float(text)
        except ValueError:
            raise ValueError(
                f"Invalid value for `{name}` (from {key}): expected a number"
                + (" or 'none'" if "None" in types else "")
                + f". Received: {key}={raw!r}"
            ) from None
    return text


# ------------------------------------------------------------------ load
def load(
    cls,
    path: str | os.PathLike | None,
    environ: Mapping[str, str] | None,
    overrides: Mapping[str, Any],
    section: str,
    prefix: str,
    skip_prefixes: tuple[str, ...] = (),
):
    """Builds `cls` from defaults < file section < environment < overrides.

    `None` overrides are ignored (absl flags left unset change nothing). A
    field value that fails validation is reported with where it came from
    (the file, the variable, or the keyword).
    """
    environ = os.environ if environ is None else environ
    path = path if path is not None else environ.get(CONFIG_FILE_ENV) or None
    merged: dict[str, Any] = {}
    origin: dict[str, str] = {}
    if path is not None:
        values = read_section(path, section)
        cls.check_keys(values, f"config file {path}")
        merged.update(values)
        origin.update({k: f"config file {path}" for k in values})
    for name, (key, value) in env_values(cls, environ, prefix, skip_prefixes).items():
        merged[name] = value
        origin[name] = f"environment variable {key}"
    explicit = {k: v for k, v in overrides.items() if v is not None}
    cls.check_keys(explicit, "keyword arguments")
    merged.update(explicit)
    origin.update({k: "keyword argument" for k in explicit})
    try:
        return cls(**merged)
    except (ValueError, TypeError) as e:
        m = re.match(r"Invalid value for `(\w+)`", str(e))
        if m and m.group(1) in origin and origin[m.group(1)] != "keyword argument":
            raise type(e)(f"{e} (set by {origin[m.group(1)]})") from None
        raise
