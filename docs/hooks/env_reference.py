"""MkDocs hook: the environment-variable reference, generated from the config classes.

A page line `{{ env_table("tfdist_opt.strategy.config.StrategyConfig") }}`
becomes a table with one row per dataclass field: the variable
(`<module ENV_PREFIX><FIELD>`), the field, its default, and a link to the
field's meaning on the configuration reference. A new field appears here
without any edit to the docs.

`code_env_names()` lists every `TFDIST_*` name written in the package's
source; `tests/docs/test_reference.py` checks that the built page names each
one, so a variable the code reads or sets without a row here fails a test.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re

import config_reference  # docs/hooks, registered before this hook

_REPO = pathlib.Path(__file__).resolve().parents[2]
_CALL = re.compile(r'\{\{\s*env_table\("([\w.]+)"\)\s*\}\}')
_NAME = re.compile(r"\bTFDIST_[A-Z0-9_]*[A-Z0-9]\b")


def env_table(dotted: str) -> str:
    module, cls = config_reference._import(dotted)  # noqa: SLF001
    prefix = module.ENV_PREFIX
    rows = ["| variable | field | default |", "|---|---|---|"]
    for field in dataclasses.fields(cls):
        rows.append(
            f"| `{prefix}{field.name.upper()}` | "
            f"`{cls.__name__}.{field.name}` | "
            f"{config_reference._default(field)} |"
        )  # noqa: SLF001
    return "\n".join(rows)


def code_env_names() -> set[str]:
    """Every `TFDIST_*` name in tfdist_opt/'s source, and the computed ones."""
    names = set()
    for path in (_REPO / "tfdist_opt").rglob("*.py"):
        names.update(_NAME.findall(path.read_text()))
    config_files = config_reference._import("tfdist_opt.config_files.ENV_PREFIX")[0]  # noqa: SLF001
    names.update(config_files.NON_FIELD_ENVS)
    return names


def on_page_markdown(markdown, page, config, files):  # noqa: ARG001 (MkDocs API)
    return _CALL.sub(lambda m: env_table(m.group(1)), markdown)
