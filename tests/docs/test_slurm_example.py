"""The SLURM batch script the Deploy page shows is a valid job.

Without a SLURM cluster, this checks what can be checked without one (the
real cluster runs it in tests/slurm/test_slurm_cluster.py):
`docs/examples/slurm_job.sh` is valid bash, its `#SBATCH` directives come
before the first command and are sbatch long options, and its
`tfdist-opt launch --slurm` line, run (without `--run`) in the environment
SLURM gives an allocation of the directives' size, prints the `srun` line
the page shows: one task per node, failing together, each task building its
TF_CONFIG (`--slurm-task`).
"""

import os
import pathlib
import re
import shlex
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "docs" / "examples" / "slurm_job.sh"

# sbatch long options the script may use (sbatch(1)).
_SBATCH_OPTIONS = {
    "job-name",
    "nodes",
    "ntasks",
    "ntasks-per-node",
    "cpus-per-task",
    "gpus-per-node",
    "gpus-per-task",
    "time",
    "signal",
    "output",
    "error",
    "partition",
    "account",
    "requeue",
    "open-mode",
    "mem",
    "exclusive",
    "constraint",
}


def _directives() -> dict[str, str]:
    """{option: value} of the #SBATCH lines; they must precede every command."""
    found, commands_started = {}, False
    for line in SCRIPT.read_text().splitlines()[1:]:
        stripped = line.strip()
        if stripped.startswith("#SBATCH"):
            assert not commands_started, f"#SBATCH after the first command: {line!r}"
            m = re.fullmatch(r"#SBATCH --([a-z-]+)(?:=(\S+))?", stripped)
            assert m, f"not an #SBATCH --option[=value] line: {line!r}"
            found[m[1]] = m[2] or ""
        elif stripped and not stripped.startswith("#"):
            commands_started = True
    return found


def test_script_is_valid_bash():
    p = subprocess.run(["bash", "-n", str(SCRIPT)], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr


def test_directives_are_sbatch_options():
    directives = _directives()
    assert set(directives) <= _SBATCH_OPTIONS, set(directives) - _SBATCH_OPTIONS
    assert re.fullmatch(r"TERM@\d+", directives["signal"])  # preemption save: exit 42


def test_launch_line_prints_one_srun_step_over_the_allocation(tmp_path):
    directives = _directives()
    nodes = int(directives["nodes"])
    per_node = int(directives["ntasks-per-node"])
    (line,) = [
        ln
        for ln in SCRIPT.read_text().splitlines()
        if "tfdist-opt launch" in ln and not ln.lstrip().startswith("#")
    ]
    words = shlex.split(line.split("tfdist-opt launch", 1)[1].split("; then")[0])
    assert "--slurm" in words and "--run" in words, words
    words.remove("--run")  # print the srun line instead of running it
    env = dict(
        os.environ,
        SLURM_JOB_NODELIST=f"node[1-{nodes}]",
        SLURM_TASKS_PER_NODE=f"{per_node}(x{nodes})",
        SLURM_NTASKS=str(nodes * per_node),
        BACKUPS=str(tmp_path),
        PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    p = subprocess.run(
        [sys.executable, "-m", "tfdist_opt", "launch", *words],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    srun = shlex.split(p.stdout.strip())
    assert srun[:4] == [
        "srun",
        f"--ntasks={nodes * per_node}",
        "--kill-on-bad-exit=1",
        f"--nodes={nodes}",
    ], srun
    tail = srun[srun.index("--slurm-task") - 3 :]
    assert tail[:4] == ["-m", "tfdist_opt", "launch", "--slurm-task"], srun
    assert srun[srun.index("--") + 1 :] == words[words.index("--") + 1 :], srun
