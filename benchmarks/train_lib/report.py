"""The benchmark's output: the header, result rows, summary, JSON/CSV/PNG.

Summary keys: `opt_eps`; with `--compare=baseline|ablation` also `speedup`
(opt / baseline examples/sec), `baseline_eps` and `speedup_<setting>` for
ablation rows; with `--compare=stall` `stall_off_eps` and
`stall_inspector_ratio` (inspector on / off examples/sec).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from benchmarks import common
from benchmarks.train_lib import breakdown
from benchmarks.train_lib import overlap
from benchmarks.train_lib import settings as settings_lib


def header(printer, cfg, strategy, inputs, settings, args, replicas: int, workers: int) -> None:
    """The tf_cnn_benchmarks-style preamble (chief only)."""
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    from tfdist_opt.strategy import plan as plan_lib  # pylint: disable=g-import-not-at-top
    from tfdist_opt.strategy import topology  # pylint: disable=g-import-not-at-top

    plan = plan_lib.plan_strategy(cfg, topology.detect_topology())
    devices = strategy.extended.worker_devices
    printer(f"TensorFlow:  {tf.__version__}")
    printer(
        f"Model:       {args.model} ({inputs.image_size}x"
        f"{inputs.image_size}x3, {args.num_classes} classes)"
    )
    printer(f"Dataset:     {inputs.describe()}")
    printer("Mode:        training")
    printer(f"Batch size:  {inputs.global_batch} global")
    printer(f"             {args.batch_size} per device")
    printer(f"Num batches: {args.batches} timed (+{args.warmup} warm-up), windows of {args.window}")
    printer(f"Devices:     {list(devices)} x {workers} worker(s) = {replicas} replica(s)")
    printer(f"Strategy:    {type(strategy).__name__}")
    printer(f"All-reduce:  {plan.all_reduce}")
    printer("Optimizer:   sgd (momentum 0.9)")
    printer(f"Config:      {cfg.to_dict()}")
    for s in settings:
        printer(f"Setting:     {s.name}: {s.describe()}")
    if args.in_process_compare:
        printer("Baseline:    " + baseline_doc(strategy))
    printer("=" * 10)


def baseline_doc(strategy) -> str:
    return settings_lib.BASELINE_DOC.format(strategy=type(strategy).__name__)


def result_row(run, args, inputs, replicas: int, workers: int) -> dict[str, Any]:
    """One `results` row for a finished `SettingRun`."""
    stats, setting = run.stats(), run.setting
    return {
        "setting": setting.name,
        "model": args.model,
        "data": inputs.describe(),
        "input_pipeline": setting.pipeline,
        "bytes_per_pack": setting.bytes_per_pack,
        "compression": setting.compression,
        "grad_accum": setting.grad_accum,
        "mixed_precision": setting.mixed_precision,
        "jit_compile": setting.jit_compile,
        "tune_malloc": setting.tune_malloc,
        "hooked": setting.hooked,
        "global_batch": inputs.global_batch,
        "window_batches": args.window,
        "rounds": args.rounds,
        "timed_batches": args.per_round * args.rounds,
        "replicas": replicas,
        "workers": workers,
        "params": run.model.count_params(),
        "wall_s": run.wall_s,
        **_bytes_per_step(run.model),
        "round_medians": [round(m, 2) for m in run.round_medians],
        **stats.to_dict(),
    }


def _bytes_per_step(model) -> dict[str, Any]:
    """Gradient bytes one step sends (PowerSGD: factors + uncompressed rest)."""
    from tfdist_opt.gradients.binding import hooks  # pylint: disable=g-import-not-at-top
    from tfdist_opt.gradients.powersgd import lowrank  # pylint: disable=g-import-not-at-top

    optimizer = getattr(model, "optimizer", None)
    state = lowrank.state_of(optimizer)
    if state is None:
        return {}
    o = hooks.state_of(optimizer).options
    return {
        "powersgd": {
            "rank": o.powersgd_rank,
            "start_step": o.powersgd_start_step,
            "min_compression": o.powersgd_min_compression,
            "wire": o.powersgd_wire,
            "matrices": len(state.plan.matrices),
        },
        "dense_bytes_per_step": state.plan.dense_bytes,
        "sent_bytes_per_step": state.plan.sent_bytes,
    }


def summarize(medians: dict[str, float], compare: str) -> dict[str, float]:
    """Summary figures from each setting's median examples/sec."""
    summary = {"opt_eps": medians["opt"]}
    if compare in ("baseline", "ablation"):
        base = medians["baseline"]
        summary.update(speedup=medians["opt"] / base, baseline_eps=base)
        for name, eps in medians.items():
            if name not in ("opt", "baseline"):
                summary["speedup_" + name.lstrip("+").replace(".", "_")] = eps / base
    if compare == "stall":
        summary.update(
            stall_off_eps=medians["stall_off"],
            stall_inspector_ratio=medians["opt"] / medians["stall_off"],
        )
    return summary


def write(
    rows, summary, *, cfg, strategy, settings, args, inputs, replicas: int, workers: int, printer
) -> None:
    """Adds `vs_baseline`, writes the report, prints the closing table."""
    for row in rows:
        row["vs_baseline"] = (
            row["median"] / summary["baseline_eps"] if "baseline_eps" in summary else None
        )
    config = {
        **common.flag_config(),
        "strategy_config": cfg.to_dict(),
        "settings": [dataclasses.asdict(s) for s in settings],
        "baseline": (baseline_doc(strategy) if args.in_process_compare else None),
        "timing": f"median over windows of {args.window} batch(es); "
        f"{args.warmup} warm-up batches at the start, one "
        "window at the start of each later round",
        "comparison": "one process per worker, one strategy object; "
        f"{args.rounds} round(s), each running every "
        f"setting for {args.per_round} timed batches in turn",
    }
    common.write_report(
        "train",
        config,
        rows,
        summary,
        output_json=common.OUTPUT_JSON.value,
        csv_path=common.CSV.value,
        plot_path=common.PLOT.value,
        plot=common.PlotSpec(
            x="setting",
            ys=("median",),
            ylabel="images/sec (global)",
            title=f"{args.model}, {inputs.describe()}, {workers} worker(s), "
            f"{replicas} replica(s), batch {args.batch_size}/replica",
        ),
    )
    for row in rows:
        eps = row["median"]
        printer(
            f"{row['setting']:>18}: {eps:10.2f} images/sec"
            + (
                f"  ({eps / summary['baseline_eps']:.2f}x baseline)"
                if "baseline_eps" in summary
                else ""
            )
        )
    if "speedup" in summary:
        printer(f"speedup (opt / baseline): {summary['speedup']:.2f}x")


def write_peer(rows, summary, config, *, cfg, args, printer) -> None:
    """Writes a `--compare=peer|scaling|cpu_split` report, prints its table."""
    common.write_report(
        "train",
        {**common.flag_config(), "strategy_config": cfg.to_dict(), **config},
        rows,
        summary,
        output_json=common.OUTPUT_JSON.value,
        csv_path=common.CSV.value,
        plot_path=common.PLOT.value,
        plot=common.PlotSpec(
            x="setting",
            ys=("median",),
            ylabel="images/sec (global)",
            title=f"{args.model}: ours vs {args.compare}",
        ),
    )
    for row in rows:
        printer(
            f"{row['setting']:>18}: {row['median']:10.2f} images/sec "
            f"(rounds: {row['round_medians']}, slowest/fastest "
            f"{row['round_spread'] or 0:.2f})"
        )
    if "fraction_of_one_process" in summary:
        printer(
            f"fraction_of_one_process (ours / one process): "
            f"{summary['fraction_of_one_process']:.2f}"
        )
    else:
        printer(f"speedup_vs_peer (ours / faster peer): {summary['speedup_vs_peer']:.2f}x")


def add_trace_figures(
    events, row, summary, overlap_steps: int, breakdown_steps: int, optimizer_name: str, printer
) -> None:
    """Adds the traced steps' overlap figures and step breakdown to `row` (and
    the overlap figures to `summary`), and prints them."""
    figures = overlap.overlap_from_events(events) if events is not None and overlap_steps else None
    if figures:
        summary.update(figures)
        row.update(figures)
        printer(
            f"overlap_fraction: {figures['overlap_fraction']:.3f} "
            f"(all-reduce time before backprop ends), first pack "
            f"early in {figures['early_start_fraction']:.0%} of steps"
        )
    parts = (
        breakdown.breakdown_from_events(events, optimizer_name)
        if events is not None and breakdown_steps
        else None
    )
    if parts:
        row["step_breakdown"] = parts
        printer(breakdown.format_breakdown(parts))
