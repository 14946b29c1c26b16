"""The generated reference pages: CLI, environment variables, exit codes.

The pages are built by MkDocs hooks (docs/hooks/cli_reference.py,
env_reference.py); these tests run the hooks on the page sources directly,
without a site build (tests/docs/test_site.py builds the site --strict).
"""

import argparse
import logging
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "hooks"))
import cli_reference  # noqa: E402  (docs/hooks, put on the path above)
import env_reference  # noqa: E402

REFERENCE = ROOT / "docs" / "reference"


def _page(name: str, hook) -> str:
    return hook.on_page_markdown((REFERENCE / name).read_text(), None, None, None)


def test_environment_page_names_every_tfdist_variable_in_the_code():
    page = _page("environment.md", env_reference)
    names = env_reference.code_env_names()
    assert {"TFDIST_OPT_CONFIG", "TFDIST_LAUNCH_WORKER_INDEX", "TFDIST_OPT_BENCHMARKS_DIR"} <= names
    missing = sorted(n for n in names if f"`{n}`" not in page)
    assert not missing, (
        f"TFDIST_* variables in tfdist_opt/ without a row on "
        f"docs/reference/environment.md: {missing}"
    )


def test_environment_page_has_a_row_per_config_field():
    import dataclasses

    from tfdist_opt.data.options import PipelineOptions
    from tfdist_opt.strategy.config import StrategyConfig

    page = _page("environment.md", env_reference)
    for cls, prefix in ((StrategyConfig, "TFDIST_OPT_"), (PipelineOptions, "TFDIST_OPT_DATA_")):
        for field in dataclasses.fields(cls):
            assert f"| `{prefix}{field.name.upper()}` | `{cls.__name__}.{field.name}` |" in page


def test_cli_page_lists_every_command_and_option():
    page = _page("cli.md", cli_reference)
    assert "{{" not in page
    for name, (_, parser) in cli_reference.cli_parsers().items():
        assert f"## `tfdist-opt {name}`" in page
        if parser is None:
            continue
        for action in parser._actions:  # noqa: SLF001
            if action.option_strings and action.help != argparse.SUPPRESS:
                assert f"`{action.option_strings[-1]}`" in page, (name, action.option_strings)
    assert "| `--output_json` |" in page and "| `--compare` |" in page  # benchmark flags


def test_a_new_option_appears_and_one_without_help_warns(monkeypatch, caplog):
    from tfdist_opt.cli import k8s

    build = k8s.build_parser

    def with_more():
        p = build()
        p.add_argument("--brand-new", metavar="X", help="a new option")
        p.add_argument("--undocumented")
        return p

    monkeypatch.setattr(k8s, "build_parser", with_more)
    with caplog.at_level(logging.WARNING, logger="mkdocs.hooks.cli_reference"):
        page = cli_reference.cli_reference()
    assert "| `--brand-new` | `X` | - | a new option |" in page
    assert [r.getMessage() for r in caplog.records] == [
        "`tfdist-opt k8s --undocumented` has no help text; the CLI reference is generated from it."
    ]


def test_exit_code_page_matches_the_constants():
    from tfdist_opt.callbacks.preemption import PREEMPTION_EXIT_CODE
    from tfdist_opt.stall import STALL_EXIT_CODE

    page = (REFERENCE / "exit-codes.md").read_text()
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| (\S+) \| [^|]+ \| (.*)$", page, re.M)}
    assert "PREEMPTION_EXIT_CODE" in rows[str(PREEMPTION_EXIT_CODE)]
    assert "STALL_EXIT_CODE" in rows[str(STALL_EXIT_CODE)]
    assert {"0", "1", "2", "128+N"} <= set(rows)
