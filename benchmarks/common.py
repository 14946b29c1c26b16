"""Functions shared by the benchmark binaries.

What every binary under `benchmarks/` needs, in one place:

- output flags: `--output_json`, `--csv`, `--plot` (FlagHolders defined here,
  once, when a binary imports this module);
- timing: `time_steps()` runs a step function, drops warm-up steps and
  returns durations; `summarize()` turns durations into a `RateStats` whose
  `format()` is the tf_cnn_benchmarks line
  `images/sec: X +/- Y (jitter = Z)`;
- reporting: `write_report()` writes, on the chief only, the JSON
  `{"benchmark", "config", "environment", "provenance", "results",
  "summary"}`, a CSV of the result rows and (when asked) a PNG plot.
  `provenance` is what a figure needs to stay checkable: the commit, the
  resolved `StrategyConfig`, the `StrategyConfig` defaults of that commit
  and the machine (tests/docs/test_headline.py compares pages that call a
  figure "the defaults" with it).

Library code in `tfdist_opt` never reads flags; binaries read them at the top
of `main`, and pass plain values to these functions (which take no flags
themselves except `flag_config()`, which reports them).

Example (inside a binary's `main`):
    times = common.time_steps(lambda: step(), steps=50, warmup=5)
    stats = common.summarize(times, items_per_step=batch)
    print(stats.format("images/sec"))
    common.write_report("mybench", common.flag_config(), [row], {"speedup": s},
                        output_json=common.OUTPUT_JSON.value,
                        csv_path=common.CSV.value, plot_path=common.PLOT.value)
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Mapping, Sequence

from absl import flags
from absl import logging

from benchmarks import report_files
from benchmarks.report_files import PlotSpec  # noqa: F401  (re-exported)
from benchmarks.report_files import plot_results  # noqa: F401  (re-exported)
from benchmarks.report_files import write_csv  # noqa: F401  (re-exported)

OUTPUT_JSON = flags.DEFINE_string(
    "output_json", None, "Write the results as JSON here (chief only)."
)
CSV = flags.DEFINE_string("csv", None, "Write the result rows as CSV here (chief only).")
PLOT = flags.DEFINE_string(
    "plot", None, "Write a PNG plot of the results here (chief only; needs matplotlib)."
)

_THIS_MODULE = __name__


# --------------------------------------------------------------- timing
@dataclasses.dataclass(frozen=True)
class RateStats:
    """Throughput over measured steps (warm-up already excluded).

    Attributes:
        median: float. Median of per-step rates (items/sec).
        spread: float. Standard error of that median,
            `1.2533 * stdev / sqrt(n)` (the "+/-").
        jitter: float. Robust per-step variability, `1.4826 * MAD` of the
            per-step rates (tf_cnn_benchmarks' jitter).
        mean: float. Total items / total time (the aggregate rate).
        steps: int. Measured steps.
        step_time_median_s: float. Median step duration in seconds.
    """

    median: float
    spread: float
    jitter: float
    mean: float
    steps: int
    step_time_median_s: float

    def format(self, unit: str = "images/sec") -> str:
        """`images/sec: X +/- Y (jitter = Z)`."""
        return f"{unit}: {self.median:.1f} +/- {self.spread:.1f} (jitter = {self.jitter:.1f})"

    def to_dict(self, prefix: str = "") -> dict[str, float]:
        return {prefix + k: v for k, v in dataclasses.asdict(self).items()}


def summarize(durations_s: Sequence[float], items_per_step: float, warmup: int = 0) -> RateStats:
    """Per-step rates -> median, +/- spread and jitter.

    Args:
        durations_s: sequence of float. Seconds per step.
        items_per_step: float. Items (images, examples, bytes) per step.
        warmup: int. Leading steps to drop first. Defaults to `0` (use it
            when `durations_s` still holds warm-up steps).

    Returns:
        A `RateStats`.

    Raises:
        ValueError: no step left after warm-up, or a non-positive duration.
    """
    measured = list(durations_s)[warmup:]
    if not measured:
        raise ValueError(
            f"Invalid value for `durations_s`: no step left after warm-up. "
            f"Received: {len(durations_s)} step(s), warmup={warmup}."
        )
    if min(measured) <= 0:
        raise ValueError(
            "Invalid value for `durations_s`: expected positive "
            f"durations. Received: min={min(measured)!r}"
        )
    rates = [items_per_step / d for d in measured]
    median = statistics.median(rates)
    n = len(rates)
    stdev = statistics.stdev(rates) if n > 1 else 0.0
    mad = statistics.median(abs(r - median) for r in rates)
    return RateStats(
        median=median,
        spread=1.2533 * stdev / math.sqrt(n),
        jitter=1.4826 * mad,
        mean=items_per_step * n / sum(measured),
        steps=n,
        step_time_median_s=statistics.median(measured),
    )


def time_steps(
    step_fn: Callable[[], Any],
    steps: int,
    warmup: int = 0,
    clock: Callable[[], float] = time.perf_counter,
) -> list[float]:
    """Runs `step_fn` `warmup + steps` times; returns the last `steps` durations.

    `step_fn` must finish its work before returning (e.g. pull a batch, or
    call `.numpy()`), or the time measures only dispatch.
    """
    for _ in range(warmup):
        step_fn()
    durations = []
    for _ in range(steps):
        start = clock()
        step_fn()
        durations.append(clock() - start)
    return durations


# ----------------------------------------------------------- environment
def bus_factor(num_ranks: int) -> float:
    """The all-reduce bus-bandwidth factor: busbw = algbw x 2(n-1)/n.

    nccl-tests' convention (NVIDIA/nccl-tests doc/PERFORMANCE.md): a ring
    all-reduce moves 2(n-1)/n bytes per byte of payload over each link, so
    busbw is comparable across rank counts. 1 at n = 2 (and for one rank).

    Args:
        num_ranks: int. Replicas taking part.

    Returns:
        float.

    Example:
        >>> bus_factor(4)
        1.5
    """
    return 2 * (num_ranks - 1) / num_ranks if num_ranks > 1 else 1.0


def is_chief(environ: Mapping[str, str] | None = None) -> bool:
    """True without TF_CONFIG, for the `chief` task, or worker 0 without one."""
    from tfdist_opt.strategy.topology import Topology  # pylint: disable=g-import-not-at-top
    from tfdist_opt.cluster import tf_config as tf_config_lib  # pylint: disable=g-import-not-at-top

    cfg = tf_config_lib.tf_config_from_env(os.environ if environ is None else environ)
    return Topology(tf_config=cfg).is_chief


def num_workers(environ: Mapping[str, str] | None = None) -> int:
    from tfdist_opt.strategy.topology import Topology  # pylint: disable=g-import-not-at-top
    from tfdist_opt.cluster import tf_config as tf_config_lib  # pylint: disable=g-import-not-at-top

    cfg = tf_config_lib.tf_config_from_env(os.environ if environ is None else environ)
    return Topology(tf_config=cfg).num_workers


def environment() -> dict[str, Any]:
    """Versions, devices and workers for the JSON `environment` field."""
    env: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "workers": num_workers(),
        # Other processes share these machines; ratios are read with this.
        "load_avg_1m": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }
    try:
        import tensorflow as tf  # pylint: disable=g-import-not-at-top

        env["tf"] = tf.__version__
        env["devices"] = [d.name for d in tf.config.list_logical_devices()]
    except ImportError:  # pragma: no cover - TF is a dependency
        env["tf"] = None
    try:
        import keras  # pylint: disable=g-import-not-at-top

        env["keras"] = keras.__version__
    except ImportError:  # pragma: no cover
        env["keras"] = None
    return env


def _commit() -> dict[str, Any]:
    """The checkout's commit and whether tracked files differ from it.

    An installed wheel (`tfdist-opt bench`) has no checkout: then the
    package version stands in for the commit.
    """
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def git(*args: str) -> str | None:
        try:
            p = subprocess.run(
                ["git", "-C", root, *args], capture_output=True, text=True, timeout=30
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return p.stdout.strip() if p.returncode == 0 else None

    sha = git("rev-parse", "HEAD")
    if sha is None:
        try:
            from importlib import metadata  # pylint: disable=g-import-not-at-top

            return {"commit": None, "dirty": None, "version": metadata.version("tfdist_opt")}
        except Exception:  # pylint: disable=broad-except  (not installed either)
            return {"commit": None, "dirty": None, "version": None}
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return {"commit": sha, "dirty": bool(dirty) if dirty is not None else None}


def _machine() -> dict[str, Any]:
    """The host: CPU model, cores, memory and kernel (`platform`)."""
    machine: dict[str, Any] = {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "cpu_model": None,
        "memory_bytes": None,
    }
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    machine["cpu_model"] = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    machine["memory_bytes"] = int(line.split()[1]) * 1024
                    break
    except OSError:  # not Linux: platform and cpu_count say enough
        pass
    return machine


def provenance(strategy_config: Any = None) -> dict[str, Any]:
    """What a result was measured with: commit, `StrategyConfig`, machine.

    Args:
        strategy_config: `StrategyConfig` or None. The binary's resolved
            config; None: the one `define_strategy_flags()`'s function
            gives (a binary with `--config` and the field flags), else
            `StrategyConfig.load()` (defaults < `$TFDIST_OPT_CONFIG` <
            `TFDIST_OPT_*`), what a script calling `opt_strategy()` with
            no keywords gets here.

    Returns:
        `{"commit", "dirty", "strategy_config", "strategy_defaults",
        "machine"}`: `strategy_defaults` is `StrategyConfig()` of this
        commit, so a page quoting the file as "the defaults" can be checked
        against today's defaults after they change.
    """
    from tfdist_opt.strategy import config as config_lib  # pylint: disable=g-import-not-at-top

    resolved: Any
    try:
        if strategy_config is None and _resolved_strategy_config is not None:
            strategy_config = _resolved_strategy_config()
        if strategy_config is None:
            strategy_config = config_lib.StrategyConfig.load()
        resolved = dataclasses.asdict(strategy_config)
    except Exception as e:  # pylint: disable=broad-except  (the run's figures still count)
        # A bad TFDIST_OPT_* variable in the benchmark's own environment
        # must not lose the results measured before it is read here.
        resolved = {"error": f"{type(e).__name__}: {e}"}
    return {
        **_commit(),
        "strategy_config": resolved,
        "strategy_defaults": dataclasses.asdict(config_lib.StrategyConfig()),
        "machine": _machine(),
    }


def flag_config(extra_modules: Sequence[str] = ()) -> dict[str, Any]:
    """Every flag the running binary defines (and this module's), by name.

    The binary's flags are those registered under `sys.argv[0]` (absl's key
    for `__main__`) plus any `extra_modules`.
    """
    fv = flags.FLAGS
    by_module = fv.flags_by_module_dict()
    wanted = {sys.argv[0], _THIS_MODULE, *extra_modules}
    if sys.modules.get("__main__") is not None:
        wanted.add(getattr(sys.modules["__main__"], "__file__", "") or "")
    config = {}
    for module, module_flags in by_module.items():
        if module in wanted or module.endswith(tuple(os.path.basename(w) for w in wanted if w)):
            for flag in module_flags:
                config[flag.name] = flag.value
    return dict(sorted(config.items()))


# ---------------------------------------------------- StrategyConfig flags
# The function `define_strategy_flags()` returned, for `provenance()`.
_resolved_strategy_config: Callable[[], Any] | None = None


def define_strategy_flags() -> Callable[[], Any]:
    """Defines `--config` and one flag per `StrategyConfig` field.

    Flags are generated from the dataclass, so a new field is a new flag
    with no edit here; every default is None, so a flag left unset
    overrides nothing (`StrategyConfig.load` drops None). Call once, at
    module level of a binary.

    Returns:
        A function giving the effective config (defaults < `--config` file <
        `TFDIST_OPT_*` env < set flags); it raises `app.UsageError` naming
        the flag for a value that does not parse.
    """
    from absl import app  # pylint: disable=g-import-not-at-top

    from tfdist_opt.gradients.powersgd import powersgd  # pylint: disable=g-import-not-at-top
    from tfdist_opt.strategy import config as config_lib  # pylint: disable=g-import-not-at-top

    choices = {
        "mode": config_lib.MODES,
        "all_reduce": config_lib.ALL_REDUCE,
        "mixed_precision": config_lib.MIXED_PRECISION,
        "compression": config_lib.COMPRESSION,
        "powersgd_wire": powersgd.WIRES,
        "storage_sharing": config_lib.STORAGE_SHARING,
        "cpu_split": config_lib.CPU_SPLIT,
        "jit_fallback": config_lib.JIT_FALLBACKS,
    }
    config_flag = flags.DEFINE_string(
        "config",
        None,
        "StrategyConfig file (.json/.toml) or preset name from "
        "configs/ (e.g. multi_worker_ring_cpu).",
    )
    holders, int_or_word = {}, {}
    for field in dataclasses.fields(config_lib.StrategyConfig):
        name, kind, doc = field.name, field.type, f"StrategyConfig.{field.name}"
        if name in choices:
            holders[name] = flags.DEFINE_enum(name, None, list(choices[name]), doc)
        elif kind == "bool":
            holders[name] = flags.DEFINE_boolean(name, None, doc)
        elif kind in ("int", "int | None"):  # replicas: None is unset
            holders[name] = flags.DEFINE_integer(name, None, doc)
        elif kind in ("float | None", "float"):
            holders[name] = flags.DEFINE_float(name, None, doc)
        elif kind == "int | str":  # bytes_per_pack: an int or "auto"
            holders[name] = flags.DEFINE_string(name, None, doc + ": int or auto")
            int_or_word[name] = "auto"
        else:
            raise TypeError(f"No flag type for StrategyConfig.{name}: {kind}")

    def strategy_config():
        overrides = {name: h.value for name, h in holders.items()}
        for name, word in int_or_word.items():
            value = overrides[name]
            if value is not None and value != word:
                try:
                    overrides[name] = int(value)
                except ValueError:
                    raise app.UsageError(
                        f"Invalid value for `--{name}`: expected a non-negative "
                        f"int or {word}. Received: --{name}={value}"
                    ) from None
        return config_lib.StrategyConfig.load(config_flag.value, **overrides)

    global _resolved_strategy_config
    _resolved_strategy_config = strategy_config
    return strategy_config


# -------------------------------------------------------------- reports
def write_report(
    name: str,
    config: Mapping[str, Any],
    results: Sequence[Mapping[str, Any]],
    summary: Mapping[str, Any],
    *,
    output_json: str | None = None,
    csv_path: str | None = None,
    plot_path: str | None = None,
    plot: PlotSpec | None = None,
    environ: Mapping[str, str] | None = None,
    strategy_config: Any = None,
) -> dict[str, Any]:
    """Builds the report and, on the chief only, writes JSON / CSV / PNG.

    Args:
        name: str. Benchmark name (`"input_pipeline"`).
        config: mapping. Every flag (see `flag_config`).
        results: sequence of mappings. One row per measured setting.
        summary: mapping. The named figures the issue asks for.
        output_json, csv_path, plot_path: str or None. Where to write.
        plot: `PlotSpec` or None. Required with `plot_path`.
        environ: mapping or None. For TF_CONFIG. Defaults to `os.environ`.
        strategy_config: `StrategyConfig` or None. For `provenance`; None
            resolves it as `provenance()` says.

    Returns:
        The report dict (on every worker).

    Raises:
        ValueError: `plot_path` without a `plot` spec.
        ImportError: `plot_path` given and matplotlib is missing.
    """
    report = {
        "benchmark": name,
        "config": dict(config),
        "environment": environment(),
        "provenance": provenance(strategy_config),
        "results": [dict(r) for r in results],
        "summary": dict(summary),
    }
    if plot_path and plot is None:
        raise ValueError(
            "Invalid arguments: `plot_path` needs a `plot` "
            f"PlotSpec. Received: plot_path={plot_path!r}, plot=None"
        )
    if not is_chief(environ):
        return report
    if output_json:
        report_files.makedirs_for(output_json)
        with open(output_json, "w") as f:
            json.dump(report, f, indent=2, default=report_files.json_default)
            f.write("\n")
        logging.info("wrote %s", output_json)
    if csv_path:
        write_csv(csv_path, report["results"])
    if plot_path:
        plot_results(plot_path, report["results"], plot)
    return report
