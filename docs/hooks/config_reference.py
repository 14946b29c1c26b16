"""MkDocs hook: the configuration reference, generated from the config classes.

A page line `{{ config_table("tfdist_opt.strategy.config.StrategyConfig") }}`
becomes a Markdown table with one row per dataclass field: its name, type,
default, environment variable and meaning. Name, type and default come from
`dataclasses.fields()`, the environment variable from the module's
`ENV_PREFIX`, the meaning from the class docstring's `Args:` entry, so a new
field appears here without any edit to the docs. A field without an `Args:`
entry is logged as a warning, which `mkdocs build --strict` turns into a
failed build.

Registered in mkdocs.yml under `hooks:`. Imports only the pure-Python config
modules (no TensorFlow).
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import pathlib
import re
import sys

_LOG = logging.getLogger("mkdocs.hooks.config_reference")
_REPO = pathlib.Path(__file__).resolve().parents[2]
_CALL = re.compile(r'\{\{\s*config_table\("([\w.]+)"\)\s*\}\}')
_ENTRY = re.compile(r"^ {8}(\w+): (.*)$")
_TYPE_SENTENCE = re.compile(r"^([^.]{1,40}?)\.\s+")
_DEFAULTS = re.compile(r"\s*Defaults to [^.]*?(`[^`]*`)?[^.]*\.\s*$")


def _import(dotted: str):
    if str(_REPO) not in sys.path:
        sys.path.insert(0, str(_REPO))  # this checkout, not another install
    module_name, _, cls_name = dotted.rpartition(".")
    module = importlib.import_module(module_name)
    return module, getattr(module, cls_name)


def docstring_args(doc: str) -> dict[str, str]:
    """`{name: text}` from a Google-style `Args:` section (4-space indents)."""
    out: dict[str, str] = {}
    current = None
    in_args = False
    for line in (doc or "").splitlines():
        if line.strip() == "Args:":
            in_args = True
            continue
        if not in_args:
            continue
        m = _ENTRY.match(line)
        if m:
            current = m.group(1)
            out[current] = m.group(2).strip()
        elif line.startswith(" " * 12) and current:
            out[current] += " " + line.strip()
        elif line.strip():
            break  # the next section
    return out


def _meaning(text: str) -> str:
    text = _TYPE_SENTENCE.sub("", text, count=1)  # "str. " / "int or None. "
    return _DEFAULTS.sub("", text).replace("|", "\\|").strip()


def _default(field: dataclasses.Field) -> str:
    if field.default is not dataclasses.MISSING:
        value = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return "required"
    if isinstance(value, str):
        return f'`"{value}"`'
    if (
        isinstance(value, int)
        and not isinstance(value, bool)
        and value >= 1 << 16
        and value % 1024 == 0
    ):
        unit = "MiB" if value % (1 << 20) == 0 else "KiB"
        return f"`{value}` ({value >> (20 if unit == 'MiB' else 10)} {unit})"
    return f"`{value!r}`"


def config_table(dotted: str) -> str:
    """The Markdown table for the config dataclass at `dotted`."""
    module, cls = _import(dotted)
    prefix = getattr(module, "ENV_PREFIX")
    args = docstring_args(cls.__doc__)
    rows = ["| field | type | default | environment variable | meaning |", "|---|---|---|---|---|"]
    for field in dataclasses.fields(cls):
        if field.name not in args:
            _LOG.warning(
                "%s.%s has no entry in the class docstring's Args: "
                "section; document it there (the configuration "
                "reference is generated from it).",
                cls.__name__,
                field.name,
            )
        type_ = (
            getattr(field.type, "__name__", str(field.type))
            if isinstance(field.type, type)
            else str(field.type)
        )
        type_ = type_.replace("|", "\\|")
        rows.append(
            f"| `{field.name}` | `{type_}` | {_default(field)} | "
            f"`{prefix}{field.name.upper()}` | {_meaning(args.get(field.name, ''))} |"
        )
    return "\n".join(rows)


def on_page_markdown(markdown, page, config, files):  # noqa: ARG001 (MkDocs API)
    return _CALL.sub(lambda m: config_table(m.group(1)), markdown)
