r"""Training benchmark: how fast is this setup, and what does each optimisation buy?

A tf_cnn_benchmarks-style binary for Keras 3 `model.fit` under
`tfdist_opt.opt_strategy()`. Runs as one process or as every worker of a
cluster (`tfdist-opt launch -n N -- python benchmarks/train.py ...`).

    python benchmarks/train.py --model=cnn_small --batch_size=32
    tfdist-opt launch -n 2 -- python benchmarks/train.py --model=cnn_small \
        --bytes_per_pack=auto --compression=bf16 --grad_accum=4 \
        --compare=baseline --output_json=/tmp/train.json --plot=/tmp/train.png

Strategy settings come from `--config` (a path or a preset name from
`configs/`) with every `StrategyConfig` field also a flag; a flag left unset
does not override the config (precedence: defaults < config file <
`TFDIST_OPT_*` environment < flags).

`--compare=baseline` also measures, in the same invocation, the same model on
the same data with plain tf.distribute defaults (see
`train_lib.settings.BASELINE_DOC`);
`--compare=ablation` adds one row per optimisation switched on alone, so the
table says what each one buys. Summary keys: `speedup` (opt / baseline
examples/sec), `opt_eps`, `baseline_eps`, and `speedup_<setting>` for
ablation rows.

`--compare=scaling` measures ours on N workers against one process on the
same cores with the same model, compile and global batch (the limit data
parallelism on one host chases), alternated round by round like the peers.
Summary keys `fraction_of_one_process` (ours / one process),
`one_process_eps`, and `round_spread_<role>` (slowest / fastest round).

`--metrics=accuracy[,...]` compiles every model of the run with these Keras
metrics (ours, the baseline, the peers, the one process); the custom-loop
peer updates them each step like a loop's author would.

`--compare=stall` runs the configured setup with the stall inspector off
and on (`tfdist_opt.stall`: progress callbacks, a thread, a batch count in
each worker's pipeline), alternated per round; summary key
`stall_inspector_ratio` (on / off examples/sec).

`--compare=peer` measures ours against what a TF 2.21 user runs instead
(tf_keras + plain MultiWorkerMirroredStrategy, and Keras 3 + plain MWMS + a
custom training loop), each in a fresh local cluster per round, because the
Keras flavour is fixed at import (train_lib/peer_compare.py):

    tfdist-opt launch -n 2 -- python benchmarks/train.py --model=mlp \
        --compare=peer --output_json=/tmp/peer.json

Summary keys `speedup_vs_peer` (ours over the faster peer),
`speedup_vs_tf_keras`, `speedup_vs_keras3_ctl`, `peer_<name>_eps`, and
`overlap_fraction` (train_lib/overlap.py: share of the all-reduce time that
runs before backprop ends, from a TF profiler trace of `--overlap_steps`
extra steps; multi-worker runs without an in-process comparison).

Timing: a Keras callback records each batch's wall time (batch end to batch
end, so the input wait is included); `--num_warmup_batches` are dropped; the
rest is timed in windows of W batches, W the largest `grad_accum` in the run
(one whole accumulation cycle, so accumulate-only steps never look like full
steps), and reported as median +/- spread (jitter = 1.4826 MAD). With a
comparison the timed batches are split into `--rounds`; each round runs every
setting in turn on its own (already traced) model, so a load change on a
shared machine falls on every setting alike.

Layout: this file holds the flags and `main`; `benchmarks/train_lib/` holds
the settings and typed run args (`settings.py`), input pipelines
(`inputs.py`), models (`models.py`), the timed runs (`runner.py`), the
report (`report.py`), the peers (`peers.py`, `peer_compare.py`) and the
overlap trace (`overlap.py`).
"""

from __future__ import annotations

import os
import sys
import time

from absl import app
from absl import flags
from absl import logging

if __package__ in (None, ""):  # run as `python benchmarks/train.py`
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# pylint: disable=g-import-not-at-top
from benchmarks import common
from benchmarks import progress
from benchmarks.train_lib import inputs as inputs_lib
from benchmarks.train_lib import overlap
from benchmarks.train_lib import peer_compare
from benchmarks.train_lib import peers
from benchmarks.train_lib import report
from benchmarks.train_lib import runner
from benchmarks.train_lib import settings as settings_lib
# pylint: enable=g-import-not-at-top

_MODEL = flags.DEFINE_enum("model", "cnn_small", list(settings_lib.MODELS), "Model to train.")
_BATCH = flags.DEFINE_integer(
    "batch_size", 32, "Batch size per replica (per micro-batch with grad_accum)."
)
_WARMUP = flags.DEFINE_integer("num_warmup_batches", 5, "Batches run before timing starts.")
_NUM_BATCHES = flags.DEFINE_integer("num_batches", 40, "Batches timed.")
_DISPLAY_EVERY = flags.DEFINE_integer("display_every", 10, "Print a progress line every N batches.")
_IMAGE_SIZE = flags.DEFINE_integer(
    "image_size", None, "Input side (default: 224 for resnet50, 16 for mlp, else 32)."
)
_NUM_CLASSES = flags.DEFINE_integer("num_classes", 10, "Output classes.")
_DATA = flags.DEFINE_string(
    "data",
    "synthetic",
    "synthetic | tfrecord:PATTERN (tf.train.Example with an encoded `image` "
    "and an int64 `label`) | tfds:NAME (a dataset prepared in --tfds_data_dir; "
    "never downloaded).",
)
_TFDS_DATA_DIR = flags.DEFINE_string("tfds_data_dir", None, "data_dir for --data=tfds:NAME.")
_TFDS_SPLIT = flags.DEFINE_string("tfds_split", "train", "Split for --data=tfds:NAME.")
_SHUFFLE_BUFFER = flags.DEFINE_integer(
    "shuffle_buffer", 1024, "Shuffle buffer, the same in both pipelines."
)
_LEARNING_RATE = flags.DEFINE_float("learning_rate", 0.01, "SGD learning rate.")
_SEED = flags.DEFINE_integer("seed", 0, "Data and shuffle seed.")
_COMPARE = flags.DEFINE_enum(
    "compare",
    "none",
    list(settings_lib.COMPARES),
    "none: measure the configured setup only; baseline: also plain "
    "tf.distribute defaults in the same run; ablation: baseline, each "
    "optimisation alone, then all; peer: against tf_keras + plain MWMS and "
    "Keras 3 + plain MWMS + a custom loop, each in its own local cluster per "
    "round (see train_lib/peer_compare.py); scaling: ours against one "
    "process on the same cores with the same global batch, alternated; "
    "stall: the configured setup with the stall inspector off, then on, "
    "alternated per round (multi-worker; summary key stall_inspector_ratio "
    "= on / off); cpu_split: scaling plus ours with --cpu_split=pin (each worker pinned "
    "to its own cores).",
)
_PEER_ROLE = flags.DEFINE_enum(
    "peer_role",
    None,
    ["ours", *peers.PEERS],
    "Internal, set by --compare=peer: train as this role for one round.",
)
_OVERLAP_STEPS = flags.DEFINE_integer(
    "overlap_steps",
    3,
    "Multi-worker, without an in-process comparison: after "
    "timing, profile this many more steps (TF profiler) and report "
    "overlap_fraction, the share of all-reduce time before backprop ends "
    "(0: off).",
)
_BREAKDOWN_STEPS = flags.DEFINE_integer(
    "breakdown_steps",
    0,
    "After timing, profile this many more steps (TF "
    "profiler) and report `step_breakdown`: per step, the median ms of the "
    "input wait, forward/loss/metrics, backward, the gradient arithmetic "
    "(PowerSGD), XLA calls, each collective and the optimizer apply "
    "(train_lib/breakdown.py); any worker count, also with --compare=scaling "
    "(both roles) (0: off).",
)
_EPOCHS = flags.DEFINE_integer(
    "epochs",
    1,
    "Run each round's timed batches as this many Keras epochs "
    "(one fit call, --num_batches / rounds / epochs batches each, after a "
    "separate warm-up fit) and report the slowest / fastest epoch "
    "(`epoch_spread`; with --compare=scaling `epoch_spread_<role>` and "
    "`epoch_spread_ratio` = ours / one process).",
)
_TRACE_DIR = flags.DEFINE_string(
    "trace_dir",
    None,
    "Keep the --overlap_steps profile here (TensorBoard's "
    "profile plugin reads it); default: a temp dir, removed.",
)
_PEER_WORKERS = flags.DEFINE_integer(
    "peer_workers",
    2,
    "--compare=peer without TF_CONFIG: workers per local "
    "cluster (under `tfdist-opt launch -n N`: N).",
)
_METRICS = flags.DEFINE_list(
    "metrics",
    [],
    "Keras metrics every model of the run compiles with, "
    "e.g. accuracy or accuracy,top_k_categorical_accuracy (default: the loss "
    "only).",
)
_ROUNDS = flags.DEFINE_integer(
    "rounds",
    2,
    "With --compare: split --num_batches into this many rounds; "
    "each round runs every setting in turn (load changes on a shared machine "
    "then fall on all settings alike).",
)

# --config and every StrategyConfig field, default None: an unset flag
# overrides nothing.
strategy_config = common.define_strategy_flags()


def _check_positive(**values: int) -> None:
    for name, value in values.items():
        if value < 1:
            raise app.UsageError(
                f"Invalid value for `--{name}`: expected a positive int. Received: --{name}={value}"
            )


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    started = time.perf_counter()
    cfg = strategy_config()
    role = _PEER_ROLE.value
    compare = "none" if role else _COMPARE.value
    if _OVERLAP_STEPS.value < 0:
        raise app.UsageError(
            "Invalid value for `--overlap_steps`: expected an "
            f"int >= 0. Received: --overlap_steps="
            f"{_OVERLAP_STEPS.value}"
        )
    _check_positive(
        batch_size=_BATCH.value,
        num_batches=_NUM_BATCHES.value,
        rounds=_ROUNDS.value,
        display_every=_DISPLAY_EVERY.value,
        peer_workers=_PEER_WORKERS.value,
        epochs=_EPOCHS.value,
    )
    if _BREAKDOWN_STEPS.value < 0:
        raise app.UsageError(
            "Invalid value for `--breakdown_steps`: expected "
            "an int >= 0. Received: --breakdown_steps="
            f"{_BREAKDOWN_STEPS.value}"
        )
    if inputs_lib.parse_data(_DATA.value)[0] != "synthetic" and (
        compare in ("peer", "scaling", "cpu_split") or role
    ):
        raise app.UsageError(
            f"Invalid value for `--data` with --compare={compare}: "
            f"expected synthetic. Received: --data={_DATA.value}"
        )
    settings = settings_lib.plan_settings(cfg, compare)
    args = settings_lib.RunArgs.build(
        settings=settings,
        model=_MODEL.value,
        batch_size=_BATCH.value,
        num_classes=_NUM_CLASSES.value,
        seed=_SEED.value,
        learning_rate=_LEARNING_RATE.value,
        compare=compare,
        display_every=_DISPLAY_EVERY.value,
        image_size=_IMAGE_SIZE.value,
        rounds=_ROUNDS.value,
        warmup=_WARMUP.value,
        batches=_NUM_BATCHES.value,
        metrics=_METRICS.value,
        epochs=_EPOCHS.value,
    )
    if compare in ("peer", "scaling", "cpu_split"):
        return _peer_main(cfg, args, started)
    if role in peers.PEERS:
        return _peer_child(role, args)
    # Before any other TF op (virtual devices / collectives are set up here).
    import tfdist_opt  # pylint: disable=g-import-not-at-top

    strategy = tfdist_opt.opt_strategy(settings_lib.strategy_config_for(cfg, compare))
    replicas = strategy.num_replicas_in_sync
    workers = common.num_workers()
    printer = runner.Printer(common.is_chief())
    inputs = inputs_lib.Inputs(
        strategy,
        _DATA.value,
        args.batch_size * replicas,
        args.image_size,
        args.num_classes,
        args.warmup + args.batches,
        args.seed,
        _SHUFFLE_BUFFER.value,
        tfds_split=_TFDS_SPLIT.value,
        tfds_data_dir=_TFDS_DATA_DIR.value,
    )
    report.header(printer, cfg, strategy, inputs, settings, args, replicas, workers)

    # Round-robin: every setting runs one chunk per round, so load changes on
    # a shared machine fall on all settings alike.
    runs = [runner.SettingRun(s, strategy, inputs, args, printer) for s in settings]
    bar = progress.Progress(args.rounds * len(runs), enabled=common.is_chief())
    for r in range(args.rounds):
        for run in runs:
            run.run_chunk(args.per_round)
            bar.done(f"round {r + 1}/{args.rounds} {run.setting.name}")
    rows, medians = [], {}
    for run in runs:
        stats = run.stats()
        medians[run.setting.name] = stats.median
        printer("-" * 64)
        printer(
            f"total images/sec: {stats.median:.2f}  ({run.setting.name}: "
            f"{stats.format('images/sec')}; mean {stats.mean:.2f})"
        )
        printer("-" * 64)
        rows.append(report.result_row(run, args, inputs, replicas, workers))
        if role:  # raw windows for the --compare=peer coordinator
            import keras  # pylint: disable=g-import-not-at-top

            rows[-1].update(
                window_durations_s=run.window_durations, keras="keras " + keras.__version__
            )
    summary = report.summarize(medians, compare)
    if runs[-1].epoch_eps:
        spread = runs[-1].epoch_spread()
        summary["epoch_spread"] = spread
        rows[-1].update(epoch_eps=[round(e, 2) for e in runs[-1].epoch_eps], epoch_spread=spread)
        printer(f"epochs: {len(runs[-1].epoch_eps)}, slowest/fastest {spread:.2f}")
    overlap_steps = _OVERLAP_STEPS.value if workers > 1 and not args.in_process_compare else 0
    if overlap_steps or _BREAKDOWN_STEPS.value:
        events = overlap.trace_events(
            runs[-1].model,
            runs[-1].dataset,
            max(overlap_steps, _BREAKDOWN_STEPS.value),
            _TRACE_DIR.value,
            profile=common.is_chief(),
        )
        report.add_trace_figures(
            events,
            rows[-1],
            summary,
            overlap_steps,
            _BREAKDOWN_STEPS.value,
            runs[-1].model.optimizer.name,
            printer,
        )
    report.write(
        rows,
        summary,
        cfg=cfg,
        strategy=strategy,
        settings=settings,
        args=args,
        inputs=inputs,
        replicas=replicas,
        workers=workers,
        printer=printer,
    )
    printer(f"total wall time {time.perf_counter() - started:.1f} s")
    logging.info("summary: %s", summary)


def _peer_main(cfg, args, started):
    printer = runner.Printer(common.is_chief())
    result = peer_compare.coordinate(
        args, peer_workers=_PEER_WORKERS.value, printer=printer, binary=os.path.abspath(__file__)
    )
    if result is None:  # not worker 0 of the launch
        return
    rows, summary, config = result
    report.write_peer(rows, summary, config, cfg=cfg, args=args, printer=printer)
    printer(f"total wall time {time.perf_counter() - started:.1f} s")
    logging.info("summary: %s", summary)


def _peer_child(role, args):
    """One peer's run in this process (a worker of a coordinator's cluster)."""
    run = peers.PeerRun(role, args, _SHUFFLE_BUFFER.value)
    run.run(args.batches)
    replicas = run.strategy.num_replicas_in_sync
    row = report.result_row(run, args, run.inputs, replicas, common.num_workers())
    row.update(window_durations_s=run.window_durations, keras=run.keras_version)
    common.write_report(
        "train",
        common.flag_config(),
        [row],
        {"peer_eps": row["median"]},
        output_json=common.OUTPUT_JSON.value,
    )


if __name__ == "__main__":
    app.run(main)
