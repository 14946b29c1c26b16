r"""All-reduce benchmark: TF's defaults vs our packing and compression, same run.

Run under the launcher (one process per worker, RING over loopback):

    tfdist-opt launch -n 2 -- python benchmarks/allreduce.py \
        --output_json=/tmp/allreduce.json --csv=/tmp/allreduce.csv

Three measurements, all in one run:

- `tcp`: a raw single-stream TCP transfer from worker 1 to worker 0 over
  loopback (plain Python sockets), the limit a ring over this link can
  approach. Its bandwidth is the denominator of `busbw_fraction_of_loopback`.
- `sweep` (nccl-tests style): one float32 tensor of 4 KB .. `--max_bytes`
  (x4 steps) all-reduced with TF's defaults; per size: time, algbw =
  bytes / time, busbw = algbw x 2(n-1)/n. Large sizes run fewer iterations
  (`--sweep_budget_bytes`). Run under glibc's malloc defaults, under the
  allocator policy opt_strategy() sets (`tfdist_opt.strategy.devices.host_memory`:
  receive buffers reused instead of page-faulted in every step), with mmap
  off, and as ours: the streamed all-reduce of multi-worker training
  (`benchmarks/allreduce_sweep.py`, row `ours_streams`).
- `model`: ResNet-50's real gradient shapes (`keras.applications.ResNet50
  (weights=None)`, built once, never trained): TF defaults (one
  `ReplicaContext.all_reduce` of the list: a single pack), our `auto`
  policy, the measured autotune (every trial in the results, tagged
  `autotune`), bf16 / fp16 compression over the tuned packing, and
  PowerSGD at `--powersgd_rank` (`compression="powersgd"` from step 0:
  error feedback, the P and Q all-reduces, QR, through a real hooked Keras
  optimizer's state; `sent_bytes` per row is what one step puts on the
  wire, factors plus the uncompressed rest). The
  cast and concatenation costs are also timed alone (no collective) to
  show where the time goes.

Summary keys: `speedup_malloc` (TF default / the same all-reduce with our
allocator policy), `speedup_pack` (TF default time / our tuned packing),
`speedup_bf16` (TF default fp32 time / bf16 with our tuned packing),
`speedup_bf16_one_pack` (bf16 alone, TF's single pack), `speedup_powersgd`
and `powersgd_bytes_ratio` (dense bytes / bytes PowerSGD sends),
`busbw_fraction_of_loopback` (best sweep busbw / TCP stream bandwidth),
`tcp_gbps`, `best_busbw_gbps`, `best_busbw_gbps_default_malloc`,
`best_busbw_gbps_no_mmap` (the sweep also runs with `M_MMAP_MAX=0`: no
buffer is ever mmapped, so packs > 32 MiB are reused too), and
`num_channels_per_target` when `--num_channels_per_target` is set. The
baseline rows run with glibc's defaults; every "ours" row with our policy.

Timings are medians over `--iters` (warm-up excluded) with spread; absolute
figures are noise on a shared machine, the ratios are the result.
"""

from __future__ import annotations

import os
import sys

from absl import app
from absl import flags
from absl import logging

if __package__ in (None, ""):  # run as `python benchmarks/allreduce.py`
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import allreduce_sweep  # pylint: disable=g-import-not-at-top
from benchmarks import allreduce_timing  # pylint: disable=g-import-not-at-top
from benchmarks import allreduce_transport  # pylint: disable=g-import-not-at-top
from benchmarks import common  # pylint: disable=g-import-not-at-top
from benchmarks import progress  # pylint: disable=g-import-not-at-top

_all_sum = allreduce_timing.all_sum
_timer = allreduce_timing.timer
_scalar = allreduce_timing.scalar
_numel = allreduce_timing.numel

_MODE = flags.DEFINE_enum(
    "mode", "all", ["all", "sweep", "model", "tcp"], "Which measurements to run."
)
_MIN_BYTES = flags.DEFINE_integer("min_bytes", 4096, "Smallest sweep message.")
_MAX_BYTES = flags.DEFINE_integer("max_bytes", 256 * 2**20, "Largest sweep message.")
_ITERS = flags.DEFINE_integer("iters", 10, "Timed iterations per setting.")
_WARMUP = flags.DEFINE_integer("warmup", 2, "Untimed iterations per setting.")
_SWEEP_BUDGET = flags.DEFINE_integer(
    "sweep_budget_bytes",
    1 << 30,
    "Bytes per sweep size across its timed iterations (at least 3 iterations).",
)
_PSGD_RANK = flags.DEFINE_integer("powersgd_rank", 4, "Rank of the PowerSGD row.")
_MODEL = flags.DEFINE_enum(
    "model", "resnet50", ["resnet50", "small"], "Gradient shapes for the model mode."
)
_TCP_BYTES = flags.DEFINE_integer("tcp_bytes", 1 << 30, "Bytes per TCP trial.")
_TCP_TRIALS = flags.DEFINE_integer("tcp_trials", 3, "TCP trials (best kept).")
_CHANNELS = flags.DEFINE_integer(
    "num_channels_per_target",
    None,
    "gRPC channels per peer for TF's server "
    "(ConfigProto.rpc_options.num_channels_per_target; TF's default 1). Needs "
    "its own launch: compare invocations.",
)
_RECV_CHUNK = flags.DEFINE_integer(
    "recv_buf_max_chunk",
    None,
    "Bytes per piece of a RecvBuf response in TF's "
    "gRPC worker (ConfigProto.experimental.recv_buf_max_chunk; TF's default 0 "
    "= 4096-byte pieces, -1 = one piece). Needs its own launch.",
)
_AUTOTUNE_CSV = flags.DEFINE_string(
    "autotune_csv", None, "Also write the autotune trials to this CSV (chief)."
)


# --------------------------------------------------------------- model
_MODEL_ROWS = 10  # row(...) calls in _model, for the progress line's ETA


def _model(strategy, n, is_chief):
    import tensorflow as tf

    from tfdist_opt.strategy.devices import host_memory
    from tfdist_opt.gradients.autotune import autotune
    from tfdist_opt.gradients.collectives import collectives
    from tfdist_opt.gradients.collectives import packing

    shapes = allreduce_timing.model_shapes(_MODEL.value)
    nbytes = sum(4 * _numel(s) for s, _ in shapes)
    with strategy.scope():
        grads = [tf.zeros(s, d) for s, d in shapes]
    iters, warmup = _ITERS.value, _WARMUP.value
    rows = []
    bar = progress.Progress(_MODEL_ROWS, enabled=is_chief)

    def row(setting, res, **extra):
        algbw = nbytes / res["time_s"]
        r = {
            "section": "model",
            "setting": setting,
            "bytes": nbytes,
            **res,
            "algbw_gbps": algbw / 1e9,
            "busbw_gbps": algbw * common.bus_factor(n) / 1e9,
            **extra,
        }
        logging.info(
            "model %-28s %8.2f ms  busbw %.3f GB/s", setting, 1e3 * res["time_s"], r["busbw_gbps"]
        )
        bar.done(f"model {setting}")
        rows.append(r)
        return r

    def ours(bytes_per_pack, wire_dtype=None):
        layer = collectives.Collectives(
            strategy, collectives.Codec(wire_dtype), collectives.Packing(bytes_per_pack)
        )
        return lambda: _scalar(layer.all_reduce_sum(grads))

    def plain():
        return _scalar(tf.distribute.get_replica_context().all_reduce("SUM", grads))

    # The baseline is TF as it comes, glibc's malloc included; every "ours"
    # row runs with the allocator policy opt_strategy() sets (host_memory).
    host_memory.restore_defaults()
    default = row("tf_default_fp32", _timer(strategy, plain, iters, warmup), num_tensors=len(grads))
    host_memory.tune_for_collectives()
    malloc_only = row("tf_default_fp32_tuned_malloc", _timer(strategy, plain, iters, warmup))
    sizes = [4 * _numel(s) for s, _ in shapes]
    policy = packing.auto_pack_policy(sizes)
    auto = row(
        "ours_auto_policy_fp32",
        _timer(strategy, ours("auto"), iters, warmup),
        num_packs=len(packing.assign_buckets(sizes, policy)),
        policy=policy.describe(),
    )
    best, trials = autotune.tune(
        strategy,
        shapes,
        collectives.Codec(),
        warmup=1,
        iters=max(3, iters // 2),
        csv_path=_AUTOTUNE_CSV.value if is_chief else None,
    )
    for t in trials:
        rows.append(
            {
                "section": "autotune",
                "setting": f"bytes_per_pack={t['bytes_per_pack']}",
                "bytes": nbytes,
                "time_s": t["median_s"],
                "bytes_per_pack": t["bytes_per_pack"],
                "num_packs": t["num_packs"],
                "chosen": t["chosen"],
                "busbw_gbps": nbytes / t["median_s"] * common.bus_factor(n) / 1e9,
            }
        )
    tuned = row(
        "ours_autotuned_fp32",
        _timer(strategy, ours(best), iters, warmup),
        bytes_per_pack=best,
    )
    pack_best = min((auto, tuned), key=lambda r: r["time_s"])
    pack_bpp = best if pack_best is tuned else "auto"
    bf16_one = row(
        "bf16_one_pack",
        _timer(strategy, ours(0, "bfloat16"), iters, warmup),
    )
    bf16 = row(
        "ours_bf16_packed",
        _timer(
            strategy,
            ours(pack_bpp, "bfloat16"),
            iters,
            warmup,
        ),
        bytes_per_pack=pack_bpp,
    )
    fp16 = row(
        "ours_fp16_packed",
        _timer(
            strategy,
            ours(pack_bpp, "float16"),
            iters,
            warmup,
        ),
        bytes_per_pack=pack_bpp,
    )

    psgd, psgd_plan = allreduce_timing.powersgd(strategy, shapes, _PSGD_RANK.value, iters, warmup)
    psgd = row(
        f"ours_powersgd_rank{_PSGD_RANK.value}",
        psgd,
        sent_bytes=psgd_plan.sent_bytes,
        matrices=len(psgd_plan.matrices),
    )
    for r, sent in (
        (default, nbytes),
        (malloc_only, nbytes),
        (auto, nbytes),
        (tuned, nbytes),
        (bf16_one, nbytes // 2),
        (bf16, nbytes // 2),
        (fp16, nbytes // 2),
    ):
        r["sent_bytes"] = sent

    # Where the time goes: local work alone, no collective.
    row(
        "local_cast_bf16_only",
        _timer(strategy, lambda: _scalar([tf.cast(g, tf.bfloat16) for g in grads]), iters, warmup),
    )
    row(
        "local_concat_split_only",
        _timer(
            strategy,
            lambda: _scalar(
                tf.split(
                    tf.concat([tf.reshape(g, [-1]) for g in grads], 0),
                    [_numel(s) for s, _ in shapes],
                )
            ),
            iters,
            warmup,
        ),
    )
    summary = {
        "speedup_malloc": default["time_s"] / malloc_only["time_s"],
        "speedup_pack": default["time_s"] / pack_best["time_s"],
        "speedup_bf16": default["time_s"] / bf16["time_s"],
        "speedup_bf16_one_pack": default["time_s"] / bf16_one["time_s"],
        "speedup_fp16": default["time_s"] / fp16["time_s"],
        "speedup_powersgd": default["time_s"] / psgd["time_s"],
        "powersgd_bytes_ratio": nbytes / psgd_plan.sent_bytes,
        "model_bytes": nbytes,
        "model_tensors": len(grads),
        "autotuned_bytes_per_pack": best,
    }
    return rows, summary


# ---------------------------------------------------------------- main
def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    from tfdist_opt.cluster import tf_config as tf_config_lib
    from tfdist_opt.strategy.build import opt_strategy

    cfg = tf_config_lib.tf_config_from_env(os.environ)
    task = cfg["task"]["index"] if cfg else 0
    host = cfg["cluster"]["worker"][0].rsplit(":", 1)[0] if cfg else "127.0.0.1"
    allreduce_transport.apply_rpc_options(_CHANNELS.value, _RECV_CHUNK.value)
    strategy = opt_strategy(all_reduce="auto")
    n = strategy.num_replicas_in_sync
    workers = common.num_workers()
    chief = common.is_chief()
    if n < 2:
        logging.warning(
            "one replica: all-reduce is a no-op; run under "
            "`tfdist-opt launch -n 2` for real figures"
        )
    rows, summary = [], {}
    mode = _MODE.value
    if mode in ("all", "tcp"):
        tcp = allreduce_transport.tcp_stream(
            _all_sum, strategy, task, workers, host, _TCP_BYTES.value, _TCP_TRIALS.value
        )
        rows.append(
            {
                "section": "tcp",
                "setting": "python_single_stream",
                "bytes": _TCP_BYTES.value,
                "time_s": _TCP_BYTES.value / tcp,
                "algbw_gbps": tcp / 1e9,
            }
        )
        summary["tcp_gbps"] = tcp / 1e9
        logging.info("tcp single stream: %.2f GB/s", tcp / 1e9)
    if mode in ("all", "sweep"):
        sweep = allreduce_sweep.sweep(
            strategy,
            n,
            _MIN_BYTES.value,
            _MAX_BYTES.value,
            _ITERS.value,
            _WARMUP.value,
            _SWEEP_BUDGET.value,
        )
        rows += sweep
        summary["best_busbw_gbps"] = max(r["busbw_gbps"] for r in sweep)
        for key, setting in (
            ("best_busbw_gbps_default_malloc", "tf_default_fp32"),
            ("best_busbw_gbps_no_mmap", "tf_default_fp32_no_mmap"),
            ("best_busbw_gbps_ours_streams", "ours_streams"),
        ):
            summary[key] = max(r["busbw_gbps"] for r in sweep if r["setting"] == setting)
    if mode in ("all", "model"):
        model_rows, model_summary = _model(strategy, n, chief)
        rows += model_rows
        summary.update(model_summary)
    if "tcp_gbps" in summary and "best_busbw_gbps" in summary:
        summary["busbw_fraction_of_loopback"] = summary["best_busbw_gbps"] / summary["tcp_gbps"]
    summary["num_replicas"] = n
    if _CHANNELS.value is not None:
        summary["num_channels_per_target"] = _CHANNELS.value
    if _RECV_CHUNK.value is not None:
        summary["recv_buf_max_chunk"] = _RECV_CHUNK.value
    plot = common.PlotSpec(
        x="setting", ys=("busbw_gbps",), title=f"all-reduce busbw, {n} replicas", ylabel="GB/s"
    )
    common.write_report(
        "allreduce",
        common.flag_config(),
        rows,
        summary,
        output_json=common.OUTPUT_JSON.value,
        csv_path=common.CSV.value,
        plot_path=common.PLOT.value,
        plot=plot,
    )
    if chief:
        for k, v in summary.items():
            print(f"{k}: {v:.4g}" if isinstance(v, float) else f"{k}: {v}")


if __name__ == "__main__":
    app.run(main)
