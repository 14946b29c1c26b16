"""The quick starts run as typed, and print what the page says.

docs/get-started/quick-starts.md marks each scenario this machine can run
with `<!-- quick-start: NAME -->` before its ```bash block and
`<!-- you see -->` before the ```text excerpt of its output. Each test runs
the block's lines in bash, one after another, in a scratch folder that sees
the repository's `docs/` (so `docs/examples/...` paths work and written
files land there), with this interpreter's `bin/` first on PATH (`python`
and `tfdist-opt` are the installed ones), and checks every excerpt line
occurs in the output (tests/docs/excerpts.py's rules: `…` a changing value,
`...` lines left out). Lines of programs a CPU host lacks (`kubectl`) are
shown to users but not run.
"""

from __future__ import annotations

import os
import pathlib
import re
import sys

import pytest

from tests.docs import excerpts
from tests.multiworker import harness

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "get-started" / "quick-starts.md"
_SCENARIO = re.compile(
    r"<!-- quick-start: (?P<name>[\w-]+) -->\n```bash\n(?P<commands>.*?)^```\n+"
    r"<!-- you see -->\n```text\n(?P<output>.*?)^```$",
    re.M | re.S,
)
_NOT_HERE = ("kubectl ",)  # needs a cluster; the page says so


def scenarios(text: str | None = None) -> dict[str, tuple[list[str], list[str]]]:
    """{name: (command lines, excerpt lines)} of the page's runnable scenarios."""
    found = {}
    for m in _SCENARIO.finditer(PAGE.read_text() if text is None else text):
        commands = [ln for ln in m["commands"].splitlines() if ln.strip()]
        lines = [ln for ln in m["output"].splitlines() if ln.strip()]
        found[m["name"]] = (commands, lines)
    return found


def _run(commands: list[str], tmp_path: pathlib.Path, timeout: int) -> str:
    (tmp_path / "docs").symlink_to(ROOT / "docs")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_CONFIG", "TFDIST_OPT_"))}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    script = "set -e\n" + "\n".join(c for c in commands if not c.startswith(_NOT_HERE))
    return harness.run_group(["bash", "-c", script], env=env, cwd=tmp_path, timeout_s=timeout)


def _check(name: str, tmp_path: pathlib.Path, timeout: int = 300) -> str:
    commands, lines = scenarios()[name]
    out = _run(commands, tmp_path, timeout)
    missing = excerpts.missing_lines(lines, out)
    assert not missing, f"quick start {name!r}: the output lacks {missing}. Output:\n{out[-3000:]}"
    return out


def test_the_page_marks_the_scenarios_a_cpu_host_can_run():
    assert set(scenarios()) == {"laptop", "one-host-workers", "hosts-by-hand", "kubernetes", "ray"}


def test_a_wrong_excerpt_is_caught():
    text = (
        "<!-- quick-start: demo -->\n```bash\necho replicas: 1\n```\n\n"
        "<!-- you see -->\n```text\nreplicas: 2\n```\n"
    )
    ((commands, lines),) = scenarios(text).values()
    assert commands == ["echo replicas: 1"]
    assert excerpts.missing_lines(lines, "replicas: 1\n") == ["replicas: 2"]


def test_laptop(tmp_path):
    _check("laptop", tmp_path)


def test_hosts_by_hand_prints_one_line_per_host(tmp_path):
    _check("hosts-by-hand", tmp_path, timeout=120)


def test_kubernetes_writes_each_kind(tmp_path):
    _check("kubernetes", tmp_path, timeout=180)
    assert (tmp_path / "tfjob.yaml").read_text().count("nvidia.com/gpu: 1") >= 1


@pytest.mark.multiworker
def test_one_host_workers(tmp_path):
    out = _check("one-host-workers", tmp_path)
    losses = set(re.findall(r"\[worker \d\] replicas: 2 loss: (\S+)", out))
    assert len(losses) == 1, out[-2000:]  # both workers hold the same weights


@pytest.mark.multiworker
@pytest.mark.slow
def test_ray_locally(tmp_path):
    pytest.importorskip("ray")
    _check("ray", tmp_path, timeout=480)


def _labels(text: str) -> list[str]:
    return [m.group(1) for m in re.finditer(r"^([\w ]+?)\s+: ", text, re.M)]


def test_get_started_shows_every_line_tfdist_opt_info_prints(tmp_path):
    """The sample `tfdist-opt info` output has the lines the command prints, in order."""
    page = (ROOT / "docs" / "get-started" / "index.md").read_text()
    sample = page.split("## What will it build here?", 1)[1].split("```text\n", 1)[1]
    sample = sample.split("```", 1)[0]
    out = _run(["tfdist-opt info"], tmp_path, timeout=240)
    assert _labels(sample) == _labels(out), (sample, out[-2000:])
