"""The documentation site: `mkdocs build --strict`, and what keeps it honest.

The build is what CI runs (the `test` extra installs MkDocs, Material and
mkdocstrings, pinned). Under `--strict` any warning fails it: a link to a
missing page or anchor, a page missing from `nav`, an unresolved
`::: module.name`, a missing `--8<--` file, or a config field without a
docstring entry (docs/hooks/config_reference.py). `test_strict_build_fails_on`
breaks one of each in a copy of the site and sees the build fail.
"""

import dataclasses
import logging
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

from tests.multiworker.harness import REPO_ROOT

ROOT = pathlib.Path(REPO_ROOT)
DOCS = ROOT / "docs"
sys.path.insert(0, str(DOCS / "hooks"))
import config_reference  # noqa: E402  (docs/hooks, put on the path above)

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _build(config: pathlib.Path, site: pathlib.Path, cwd: pathlib.Path):
    env = dict(
        os.environ,
        NO_MKDOCS_2_WARNING="1",
        PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    return subprocess.run(
        # Not --quiet: it drops the warnings that --strict counts.
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_site_builds_strict_with_a_generated_configuration_reference(tmp_path):
    p = _build(ROOT / "mkdocs.yml", tmp_path / "site", ROOT)
    assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
    page = (tmp_path / "site" / "reference" / "configuration" / "index.html").read_text()
    from tfdist_opt.data.options import PipelineOptions
    from tfdist_opt.strategy.config import StrategyConfig

    for cls, prefix in ((StrategyConfig, "TFDIST_OPT_"), (PipelineOptions, "TFDIST_OPT_DATA_")):
        for field in dataclasses.fields(cls):
            assert f"<code>{prefix}{field.name.upper()}</code>" in page, field.name
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text()
    assert 'id="tfdist_opt.strategy.build.opt_strategy"' in api


def _site_copy(tmp_path: pathlib.Path) -> pathlib.Path:
    """The site's sources in tmp_path; the package and README are links."""
    work = tmp_path / "work"
    shutil.copytree(DOCS, work / "docs", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "mkdocs.yml", work / "mkdocs.yml")
    for name in ("tfdist_opt", "CONTRIBUTING.md"):
        (work / name).symlink_to(ROOT / name)
    return work


_BREAKAGES = {
    "broken_link": (
        "docs/guides/memory.md",
        "(model-parallel.md)",
        "(model-paralel.md)",
        "model-paralel.md",
    ),
    "missing_page": (
        "mkdocs.yml",
        "      - Callbacks: guides/callbacks.md\n",
        "      - Callbacks: guides/callbacks.md\n      - Nowhere: guides/no-such-page.md\n",
        "guides/no-such-page.md",
    ),
    "unresolved_reference": (
        "docs/reference/api.md",
        "::: tfdist_opt.strategy.build.opt_strategy",
        "::: tfdist_opt.strategy.build.opt_strategy_typo",
        "opt_strategy_typo",
    ),
    "page_not_in_nav": ("docs/guides/orphan.md", "", "# Orphan\n", "guides/orphan.md"),
    "missing_example": (
        "docs/guides/memory.md",
        "docs/examples/sharded_state.py",
        "docs/examples/sharded_state_typo.py",
        "sharded_state_typo.py",
    ),
}


@pytest.mark.parametrize("breakage", sorted(_BREAKAGES))
def test_strict_build_fails_on(breakage, tmp_path):
    path, old, new, named = _BREAKAGES[breakage]
    work = _site_copy(tmp_path)
    text = (work / path).read_text() if (work / path).exists() else ""
    assert old in text, f"{path} no longer holds {old!r}: update this test"
    (work / path).write_text(text.replace(old, new, 1))
    p = _build(work / "mkdocs.yml", tmp_path / "site", work)
    assert p.returncode != 0, p.stdout + p.stderr
    assert named in p.stdout + p.stderr, (p.stdout + p.stderr)[-3000:]


def test_configuration_reference_follows_the_dataclass(caplog):
    """A new field appears by itself; one without an Args entry is a warning."""
    with caplog.at_level(logging.WARNING, logger="mkdocs.hooks.config_reference"):
        table = config_reference.config_table("tests.docs._undocumented_config.TwoFields")
    rows = table.splitlines()[2:]
    assert rows[0] == ("| `rank` | `int` | `4` | `TFDIST_OPT_TEST_RANK` | Rank of the factors. |")
    assert rows[1].startswith(
        "| `stall_warn_s` | `float \\| None` | `None` | `TFDIST_OPT_TEST_STALL_WARN_S` |"
    )
    assert [r.getMessage() for r in caplog.records] == [
        "TwoFields.stall_warn_s has no entry in the class docstring's Args: section; "
        "document it there (the configuration reference is generated from it)."
    ]


def test_every_strategy_config_field_is_documented(caplog):
    with caplog.at_level(logging.WARNING, logger="mkdocs.hooks.config_reference"):
        config_reference.config_table("tfdist_opt.strategy.config.StrategyConfig")
        config_reference.config_table("tfdist_opt.data.options.PipelineOptions")
    assert caplog.records == []


# ------------------------------------------------------------ README, pages
README = (ROOT / "README.md").read_text()
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)


def test_readme_is_short_and_keeps_the_fresh_machine_commands():
    assert len(README.splitlines()) <= 200
    blocks = [body.strip() for lang, body in _FENCE.findall(README) if lang == "bash"]
    assert (
        "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/tfdist-opt "
        "launch -n 2 -- .venv/bin/python -m tfdist_opt.examples.train_cnn"
    ) in blocks
    assert (
        'python3 -m venv .venv && .venv/bin/pip install -e ".[test]" && .venv/bin/python -m pytest'
    ) in blocks
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'pip install --quiet -e ".[test]"' in ci and ".venv/bin/python -m pytest" in ci


def test_readme_example_is_the_tested_quickstart_file():
    (example,) = [body for lang, body in _FENCE.findall(README) if lang == "python"]
    assert example == (DOCS / "examples" / "quickstart.py").read_text()
    assert len(example.splitlines()) <= 15


def _pages():
    return sorted(DOCS.rglob("*.md")) + [ROOT / "CONTRIBUTING.md"]


def test_pages_show_code_only_by_including_example_files():
    included = set()
    for page in _pages():
        for lang, body in _FENCE.findall(page.read_text()):
            lines = [ln for ln in body.splitlines() if ln.strip()]
            snippets = [ln for ln in lines if ln.startswith("--8<--")]
            if lang == "python":
                assert lines and snippets == lines, (
                    f"{page.relative_to(ROOT)} pastes Python code; put it in "
                    "docs/examples/ and include it with --8<--"
                )
            included |= {re.search(r'"(.+)"', ln).group(1) for ln in snippets}
    examples = {
        f"docs/examples/{p.name}"
        for p in (DOCS / "examples").iterdir()
        if p.suffix in (".py", ".sh")
    }
    assert examples - included == set(), "examples no page includes"
    assert {i for i in included if i.startswith("docs/examples/")} <= examples


def test_no_file_speaks_of_work_sessions_stops_or_helpers():
    out = subprocess.run(
        [
            "git",
            "grep",
            "-nIiE",
            r"\bthis stop\b|\blast stop\b|\bstop [0-9]{2}\b|\bthis session\b|\bhelper",
            "--",
            "*.md",
            "*.py",
            ":!tests/docs/test_site.py",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode in (0, 1), out.stderr  # 1: no match
    assert out.stdout == "", out.stdout


def test_results_folder_holds_exactly_the_files_the_benchmarks_appendix_lists():
    page = (DOCS / "benchmarks-appendix.md").read_text()
    section = page.split("## Result files", 1)[1].split("\n## ", 1)[0]
    cited = set(re.findall(r"`([\w.-]+\.(?:json|csv|png|txt))`", section))
    folder = {p.name for p in (ROOT / "benchmarks" / "results").iterdir()}
    assert folder == cited, {"not cited": sorted(folder - cited), "missing": sorted(cited - folder)}


def test_nav_has_the_sections_users_know_in_order():
    """Get started -> How-to -> Deploy -> Tuning -> Fault tolerance -> Reference ->
    Internals -> Benchmarks (the shape of docs.ray.io and keras.io)."""
    import yaml  # pylint: disable=g-import-not-at-top  (MkDocs's own dependency)

    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    titles = [next(iter(entry)) for entry in nav]
    assert titles == [
        "Home",
        "Get started",
        "How-to guides",
        "Deploy",
        "Tuning",
        "Fault tolerance",
        "Reference",
        "Internals",
        "Benchmarks",
    ], titles
    deploy = [next(iter(entry.values())) for entry in nav[titles.index("Deploy")]["Deploy"]]
    assert "deploy/slurm.md" in deploy and "guides/ray.md" in deploy, deploy


# The raw TensorFlow symptoms users paste, each with its cause and fix.
_RAW_SYMPTOMS = ("UnavailableError", "DeadlineExceededError", "NCCL failure", "OOM when allocating")


def troubleshooting_entries(text: str) -> dict[str, str]:
    """{bold title line: its definition} of each entry of the troubleshooting page."""
    entries = re.findall(r"^\*\*(.+?)\n((?::.*\n)(?:  .*\n)*)", text, re.M)
    return {title: body for title, body in entries}


def missing_symptoms(text: str) -> list[str]:
    entries = troubleshooting_entries(text)
    return [
        s
        for s in _RAW_SYMPTOMS
        if not any(
            s in title and "Cause" in body and "Fix" in body for title, body in entries.items()
        )
    ]


def test_troubleshooting_has_the_raw_tensorflow_symptoms_with_cause_and_fix():
    assert missing_symptoms((DOCS / "troubleshooting.md").read_text()) == []


def test_a_symptom_without_its_entry_is_caught():
    text = (DOCS / "troubleshooting.md").read_text()
    entries = troubleshooting_entries(text)
    (title,) = [t for t in entries if "NCCL failure" in t]
    assert missing_symptoms(text.replace(f"**{title}\n{entries[title]}", "")) == ["NCCL failure"]
