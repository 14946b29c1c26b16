"""MkDocs hook: the CLI reference, generated from the parsers themselves.

A page line `{{ cli_reference() }}` becomes one section per `tfdist-opt`
command: its description, usage and a table of every option (flags, value,
default, help), read from the command's `argparse` parser
(`tfdist_opt.cli.<module>.build_parser()`, the commands listed in
`tfdist_opt.cli._COMMANDS`). A page line `{{ benchmark_flags() }}` becomes
one table per benchmark binary under `benchmarks/` with the flags it
defines (`flags.DEFINE_*("name", default, "help")`, read from the source
without running it). A new flag appears here without any edit to the docs.
An option without help text, or a command without `build_parser()`, is
logged as a warning, which `mkdocs build --strict` turns into a failed
build.

The same functions list the flags for `tests/docs/test_names.py`, which
checks every `--flag` the pages show.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import logging
import pathlib
import re
import sys

_LOG = logging.getLogger("mkdocs.hooks.cli_reference")
_REPO = pathlib.Path(__file__).resolve().parents[2]
_CLI_CALL = re.compile(r"\{\{\s*cli_reference\(\)\s*\}\}")
_BENCH_CALL = re.compile(r"\{\{\s*benchmark_flags\(\)\s*\}\}")
# Commands whose flags are another program's: `bench` hands them to a
# benchmark binary (listed by benchmark_flags()).
_PASS_THROUGH = {"bench"}


def _repo_on_path() -> None:
    if str(_REPO) not in sys.path:
        sys.path.insert(0, str(_REPO))  # this checkout, not another install


def cli_parsers() -> dict[str, tuple[str, argparse.ArgumentParser | None]]:
    """`{command: (one-line help, parser or None)}` for every `tfdist-opt` command."""
    _repo_on_path()
    cli = importlib.import_module("tfdist_opt.cli")
    out = {}
    for name, (module_name, help_) in cli._COMMANDS.items():  # noqa: SLF001
        module = importlib.import_module(module_name)
        build = getattr(module, "build_parser", None)
        if build is None and name not in _PASS_THROUGH:
            _LOG.warning(
                "%s has no build_parser(); the CLI reference is generated from it.", module_name
            )
        out[name] = (help_, build() if build else None)
    return out


def _options(parser: argparse.ArgumentParser):
    for action in parser._actions:  # noqa: SLF001 (argparse has no public list)
        if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
            continue
        if action.option_strings and action.help != argparse.SUPPRESS:
            yield action


def cli_flags() -> set[str]:
    """Every `--long-option` of every `tfdist-opt` command (suppressed ones too)."""
    flags = set()
    for _, parser in cli_parsers().values():
        if parser is not None:
            for action in parser._actions:  # noqa: SLF001
                flags.update(o for o in action.option_strings if o.startswith("--"))
    return flags


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _value(action: argparse.Action) -> str:
    if action.nargs == 0:
        return "-"
    if action.choices:
        return " \\| ".join(f"`{c}`" for c in action.choices)
    metavar = action.metavar or action.dest.upper()
    return f"`{metavar}`" + (" (optional)" if action.nargs == "?" else "")


def _default(action: argparse.Action) -> str:
    if action.required:
        return "required"
    if action.nargs == 0 or action.default in (None, argparse.SUPPRESS):
        return "-"
    return f"`{action.default}`"


def _help(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    text = action.help or ""
    if "%(" in text:
        params = dict(vars(action), prog=parser.prog)
        text = text % params
    return re.sub(r"\s*\(default: [^)]*\)", "", text)


def command_markdown(name: str, help_: str, parser) -> str:
    lines = [f"## `tfdist-opt {name}`", "", help_[:1].upper() + help_[1:] + "."]
    if parser is None:
        return "\n".join(lines)
    if parser.description:
        lines += ["", " ".join(parser.description.split())]
    usage = " ".join(parser.format_usage().split())
    lines += [
        "",
        "```text",
        usage.removeprefix("usage: "),
        "```",
        "",
        "| option | value | default | meaning |",
        "|---|---|---|---|",
    ]
    for action in _options(parser):
        if not action.help:
            _LOG.warning(
                "`tfdist-opt %s %s` has no help text; the CLI reference is generated from it.",
                name,
                action.option_strings[-1],
            )
        flags = ", ".join(f"`{o}`" for o in action.option_strings)
        lines.append(
            f"| {flags} | {_value(action)} | {_default(action)} | {_cell(_help(parser, action))} |"
        )
    return "\n".join(lines)


def cli_reference() -> str:
    return "\n\n".join(
        command_markdown(name, help_, parser) for name, (help_, parser) in cli_parsers().items()
    )


# ------------------------------------------------------------- benchmarks
@dataclasses.dataclass
class AbslFlag:
    name: str
    kind: str
    default: str
    help: str


def _literal(node) -> str:
    try:
        return repr(ast.literal_eval(node))
    except ValueError:
        return ast.unparse(node)


def _text(node) -> str:
    try:
        value = ast.literal_eval(node)
    except ValueError:
        return ast.unparse(node)
    return value if isinstance(value, str) else repr(value)


def file_flags(path: pathlib.Path) -> list[AbslFlag]:
    """The absl flags `path` defines with a literal name, in source order."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr.startswith("DEFINE_")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            continue
        args = list(node.args) + [kw.value for kw in node.keywords]
        kind = node.func.attr.removeprefix("DEFINE_")
        default = _literal(args[1]) if len(args) > 1 else "None"
        help_ = _text(args[-1]) if kind != "enum" or len(args) > 3 else ""
        out.append(AbslFlag(node.args[0].value, kind, default, help_))
    out.sort(key=lambda f: f.name)
    return out


def _defines_strategy_flags(path: pathlib.Path) -> bool:
    return "define_strategy_flags()" in path.read_text()


def benchmark_files() -> list[pathlib.Path]:
    root = _REPO / "benchmarks"
    return sorted(p for p in root.rglob("*.py") if "results" not in p.parts)


def strategy_flag_names() -> set[str]:
    """The flags `benchmarks/common.py` defines from `StrategyConfig`'s fields."""
    _repo_on_path()
    config = importlib.import_module("tfdist_opt.strategy.config")
    return {f.name for f in dataclasses.fields(config.StrategyConfig)} | {"config"}


def benchmark_flag_names() -> dict[str, str]:
    """`{flag name: kind}` over every benchmark binary and its libraries."""
    names = {name: "strategy" for name in strategy_flag_names()}
    for path in benchmark_files():
        names.update((f.name, f.kind) for f in file_flags(path))
    return names


def benchmark_flags() -> str:
    sections = []
    for path in benchmark_files():
        flags = file_flags(path)
        if not flags:
            continue
        rel = path.relative_to(_REPO)
        lines = [f"### `{rel}`", ""]
        if _defines_strategy_flags(path):
            lines += [
                "Also one flag per `StrategyConfig` field (`--config`, "
                "`--all_reduce`, `--compression`, ...; see "
                "[Configuration](configuration.md)).",
                "",
            ]
        lines += ["| flag | type | default | meaning |", "|---|---|---|---|"]
        lines += [
            f"| `--{f.name}` | {f.kind} | `{_cell(f.default)}` | {_cell(f.help)} |" for f in flags
        ]
        sections.append("\n".join(lines))
    return "\n\n".join(sections)


def on_page_markdown(markdown, page, config, files):  # noqa: ARG001 (MkDocs API)
    markdown = _CLI_CALL.sub(lambda m: cli_reference(), markdown)
    return _BENCH_CALL.sub(lambda m: benchmark_flags(), markdown)
