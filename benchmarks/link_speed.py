r"""Training and all-reduce speed where the link is the limit: emulated hosts.

Needs root (CAP_NET_ADMIN) and iproute2. For each `--link` rate it makes two
emulated hosts (`benchmarks/testbed_lib.py`: network namespaces on a bridge,
198.18.0.10 and .11, both ends of each link shaped with `tc ... tbf`) and
runs one worker in each:

    sudo python benchmarks/link_speed.py --link=1gbit,10gbit --rounds=2 \
        --output_json=/tmp/link_speed.json

Settings (`--settings`), each a fresh 2-worker cluster per round, the order
rotated every round so load changes fall on every setting alike:

- `tf_keras`, `keras3_ctl`: the peers of `benchmarks/train.py --compare=peer`
  (tf_keras + plain MultiWorkerMirroredStrategy + fit; Keras 3 + plain MWMS +
  a custom loop);
- `defaults`: `tfdist_opt.opt_strategy()` at its defaults + fit (the
  gradients as streamed pieces, `collective_streams="auto"`);
- `unstreamed`: ours with `collective_streams=0`: TF's one collective per
  pack (what the defaults ran before streams);
- `bf16`: ours with `compression="bf16"` (streamed too);
- `powersgd`: ours with `compression="powersgd"`, `powersgd_rank=4`, from the
  first step (`powersgd_start_step=0`: its default 100 uncompressed updates
  would be every timed step here); also run
  on an unshaped link (`--unshaped`) for `powersgd_vs_unshaped_<link>`;
- `pack4mb`: ours with `bytes_per_pack=4194304` (several collectives a step,
  one after the other, in backprop order);
- `s<k>_<size>` (`s2_1mb`, `s4_1mb`, `s2_512kb`, `s4_2mb`, `s2_4mb`) and
  `bf16_1mb`, `bf16_s4`: ours with other `collective_streams` (k) and
  `collective_piece_bytes` (size) than the defaults' 2 and 2 MiB; not run
  unless named in `--settings`;
- `auto`: ours with `compression="auto"` (PowerSGD, if picked, from the
  first step); `auto_picked_<link>` is what the chief's start line says.

`compute` (one process, no TF_CONFIG, the same per-worker batch) runs once
per round: its step time is the compute a worker does. Per setting the
report gives ex/s (median over windows, all rounds pooled), the ratio to the
faster peer, and the fraction of the link bound (`benchmarks/link_bound.py`:
bytes each worker sends per step / link rate, against that compute).
`tx_bytes_per_step` is host 0's measured `tx_bytes` over the run divided by
its steps (start-up traffic included: an upper cross-check).

`--sweep` adds an all-reduce sweep (`benchmarks/allreduce.py --mode=sweep`,
4 KB .. `--sweep_max_bytes`) on each link: busbw = algbw x 2(n-1)/n as a
fraction of the link rate.

Summary keys, per link L (e.g. `1gbit`): `<s>_eps_L`, `<s>_vs_peer_L`
(ours over the faster peer), `<s>_link_fraction_L` for s in defaults,
unstreamed, bf16, powersgd, pack4mb, auto (auto: when it picked none or
bf16); `auto_picked_L`; `peer_<p>_eps_L`; `compute_eps`;
`powersgd_vs_unshaped_L`; `allreduce_busbw_fraction_4mb_plus_L` (smallest
busbw / link rate over sizes >= 4 MB: TF's all-reduce with the allocator
policy ours uses) and `ours_allreduce_busbw_fraction_4mb_plus_L` (the same
for the streamed all-reduce ours trains with); `load_avg_1m_max`.

Every namespace is removed at exit, also on error, Ctrl-C and SIGTERM.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app
from absl import flags

if __package__ in (None, ""):  # run as `python benchmarks/link_speed.py`
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# pylint: disable=g-import-not-at-top
from benchmarks import common
from benchmarks import link_bound
from benchmarks import testbed_lib
# pylint: enable=g-import-not-at-top

SETTINGS = {  # name -> (train.py --peer_role, extra flags)
    "tf_keras": ("tf_keras", ()),
    "keras3_ctl": ("keras3_ctl", ()),
    "defaults": ("ours", ()),
    "unstreamed": ("ours", ("--collective_streams=0",)),
    # s<streams>_<piece size>: other collective_streams / collective_piece_bytes.
    "s2_1mb": ("ours", ("--collective_piece_bytes=1048576",)),
    "s4_1mb": ("ours", ("--collective_piece_bytes=1048576", "--collective_streams=4")),
    "s2_512kb": ("ours", ("--collective_piece_bytes=524288",)),
    "s4_2mb": ("ours", ("--collective_streams=4",)),
    "s2_4mb": ("ours", ("--collective_piece_bytes=4194304",)),
    "bf16_1mb": ("ours", ("--compression=bf16", "--collective_piece_bytes=1048576")),
    "bf16_s4": ("ours", ("--compression=bf16", "--collective_streams=4")),
    "bf16": ("ours", ("--compression=bf16",)),
    "powersgd": (
        "ours",
        ("--compression=powersgd", "--powersgd_rank=4", "--powersgd_start_step=0"),
    ),
    # Several packs, one collective each (issued in backprop order).
    "pack4mb": ("ours", ("--bytes_per_pack=4194304",)),
    # compression="auto" decides in its first 5 steps, then traces again:
    # 4 more warm-up batches keep both out of the timed ones.
    "auto": (
        "ours",
        ("--compression=auto", "--powersgd_start_step=0", f"--num_warmup_batches={5 + 4}"),
    ),
}
PEERS = ("tf_keras", "keras3_ctl")
PIECES = ("s2_1mb", "s4_1mb", "s2_512kb", "s4_2mb", "s2_4mb", "bf16_1mb", "bf16_s4")
OURS = ("defaults", "unstreamed", "bf16", "powersgd", "pack4mb", "auto") + PIECES
AUTO_LINE = "tfdist_opt: compression=auto picked "

_LINKS = flags.DEFINE_list(
    "link", ["1gbit", "10gbit"], "tc rates of the emulated links, one run set each."
)
_SETTINGS = flags.DEFINE_list(
    "settings",
    [s for s in SETTINGS if s not in PIECES],
    f"Settings to measure, of {list(SETTINGS)}.",
)
_ROUNDS = flags.DEFINE_integer("rounds", 2, "Alternated rounds.")
_MODEL = flags.DEFINE_string("model", "mlp", "benchmarks/train.py --model.")
_IMAGE_SIZE = flags.DEFINE_integer("image_size", None, "benchmarks/train.py --image_size.")
_BATCH = flags.DEFINE_integer("batch_size", 32, "Batch per worker.")
_BATCHES = flags.DEFINE_integer("num_batches", 24, "Timed batches per run.")
_WARMUP = flags.DEFINE_integer("num_warmup_batches", 5, "Warm-up batches per run.")
_UNSHAPED = flags.DEFINE_bool(
    "unshaped", True, "Also run powersgd on an unshaped link (powersgd_vs_unshaped_<link>)."
)
_SWEEP = flags.DEFINE_bool("sweep", True, "All-reduce sweep on each link.")
_SWEEP_MAX = flags.DEFINE_integer("sweep_max_bytes", 64 << 20, "Largest all-reduce of the sweep.")
_SWEEP_BUDGET = flags.DEFINE_integer(
    "sweep_budget_bytes", 64 << 20, "allreduce.py --sweep_budget_bytes."
)
_TIMEOUT = flags.DEFINE_integer("run_timeout_s", 600, "Limit per cluster run.")

HERE = os.path.dirname(os.path.abspath(__file__))
_PORTS = iter(range(23000, 30000))


def _python_env() -> dict:
    env = testbed_lib.TestBed.env({"TF_CPP_MIN_LOG_LEVEL": "2"})
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    for key in (
        "TF_USE_LEGACY_KERAS",
        "TFDIST_LAUNCH_NUM_WORKERS",
        "TFDIST_LAUNCH_WORKER_INDEX",
        "TFDIST_LAUNCH_RESTART_COUNT",
    ):
        env.pop(key, None)
    return env


def _tx_bytes(bed, host) -> int:
    out = subprocess.run(
        ["ip", "netns", "exec", host.ns, "cat", "/sys/class/net/eth0/statistics/tx_bytes"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return int(out.stdout.strip())


def _train_argv(role: str, extra, out: str) -> list[str]:
    argv = [
        sys.executable,
        os.path.join(HERE, "train.py"),
        f"--model={_MODEL.value}",
        f"--batch_size={_BATCH.value}",
        f"--num_batches={_BATCHES.value}",
        f"--num_warmup_batches={_WARMUP.value}",
        f"--peer_role={role}",
        "--overlap_steps=0",
        f"--output_json={out}",
        *extra,
    ]
    if _IMAGE_SIZE.value:
        argv.append(f"--image_size={_IMAGE_SIZE.value}")
    return argv


def _run_cluster(bed, argv_for, tmp: str, label: str) -> tuple[dict, int]:
    """Runs one worker per host; returns (chief's JSON, host 0's tx bytes)."""
    port = next(_PORTS)
    workers = [f"{h.address}:{port}" for h in bed.hosts]
    before = _tx_bytes(bed, bed.hosts[0])
    procs, logs = [], []
    for i, host in enumerate(bed.hosts):
        env = _python_env()
        env["TF_CONFIG"] = json.dumps(
            {"cluster": {"worker": workers}, "task": {"type": "worker", "index": i}}
        )
        env.update(argv_for[1])
        log = open(os.path.join(tmp, f"{label}_{i}.log"), "w+")
        logs.append(log)
        procs.append(bed.popen(host, argv_for[0], env=env, stdout=log, stderr=subprocess.STDOUT))
    deadline = time.monotonic() + _TIMEOUT.value
    try:
        for p in procs:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        for p in procs:
            bed.kill(p)
    tx = _tx_bytes(bed, bed.hosts[0]) - before
    failed = [(i, p.returncode) for i, p in enumerate(procs) if p.returncode != 0]
    if failed:
        logs[failed[0][0]].seek(0)
        tail = logs[failed[0][0]].read()[-4000:]
        raise RuntimeError(
            f"{label}: worker {failed[0][0]} exited with "
            f"{failed[0][1]} (None: killed at --run_timeout_s); "
            f"its output ends:\n{tail}"
        )
    logs[0].seek(0)
    picked = [l for l in logs[0].read().splitlines() if AUTO_LINE in l]
    for log in logs:
        log.close()
    with open(argv_for[2]) as f:
        report = json.load(f)
    if picked:
        report["results"][0]["auto_picked"] = picked[0].split(AUTO_LINE, 1)[1].split()[0]
        report["results"][0]["auto_line"] = picked[0].strip()
    return report, tx


def _run_compute(tmp: str, label: str) -> dict:
    """One process, no TF_CONFIG, the same per-worker batch: the compute."""
    out = os.path.join(tmp, f"{label}.json")
    env = _python_env()
    env.pop("TF_CONFIG", None)
    env["TF_USE_LEGACY_KERAS"] = "0"
    p = subprocess.run(
        _train_argv("ours", (), out),
        env=env,
        cwd=testbed_lib.REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=_TIMEOUT.value,
    )
    if p.returncode != 0:
        raise RuntimeError(
            f"{label}: exited with {p.returncode}; its output "
            f"ends:\n{(p.stdout + p.stderr)[-4000:]}"
        )
    with open(out) as f:
        return json.load(f)


def _sweep(bed, tmp: str, label: str) -> list[dict]:
    out = os.path.join(tmp, f"{label}.json")
    argv = [
        sys.executable,
        os.path.join(HERE, "allreduce.py"),
        "--mode=sweep",
        f"--max_bytes={_SWEEP_MAX.value}",
        f"--sweep_budget_bytes={_SWEEP_BUDGET.value}",
        f"--output_json={out}",
    ]
    report, _ = _run_cluster(bed, (argv, {}, out), tmp, label)
    return report["results"]


class _Pool:
    """Every run's windows and loads for one (link, setting)."""

    def __init__(self):
        self.windows, self.round_eps, self.loads, self.tx = [], [], [], []
        self.row = None


def _measure(beds: dict, names: list[str], tmp: str, printer) -> dict:
    pools: dict = {}
    for r in range(_ROUNDS.value):
        jobs = [(link, s) for link in beds if link != "unshaped" for s in names]
        if "unshaped" in beds:
            jobs.append(("unshaped", "powersgd"))
        jobs.append(("compute", "compute"))
        k = r % len(jobs)
        for link, setting in jobs[k:] + jobs[:k]:
            label = f"r{r}_{link}_{setting}"
            started = time.monotonic()
            if setting == "compute":
                report, tx = _run_compute(tmp, label), 0
            else:
                role, extra = SETTINGS[setting]
                out = os.path.join(tmp, label + ".json")
                report, tx = _run_cluster(
                    beds[link],
                    (
                        _train_argv(role, extra, out),
                        {"TF_USE_LEGACY_KERAS": "1" if role == "tf_keras" else "0"},
                        out,
                    ),
                    tmp,
                    label,
                )
            row = report["results"][0]
            pool = pools.setdefault((link, setting), _Pool())
            pool.windows += row.pop("window_durations_s", None) or []
            pool.round_eps.append(row["median"])
            pool.loads.append(os.getloadavg()[0])
            steps = _BATCHES.value + _WARMUP.value
            pool.tx.append(tx / steps)
            pool.row = row
            printer(
                f"round {r + 1}/{_ROUNDS.value} {link:>8} {setting:>10}: "
                f"{row['median']:8.1f} ex/s ({time.monotonic() - started:.0f} s, "
                f"load {pool.loads[-1]:.1f})"
            )
    return pools


def _rows_and_summary(pools: dict, sweeps: dict) -> tuple[list, dict]:
    rows, summary = [], {}
    compute = pools.get(("compute", "compute"))
    compute_s = None
    if compute:
        c_row = compute.row
        eps = _pooled_eps(compute, c_row)
        compute_s = _BATCH.value / eps
        summary["compute_eps"] = eps
        rows.append(
            {
                "link": "none",
                "setting": "compute",
                "median": eps,
                "round_medians": compute.round_eps,
                "load_avg_1m_rounds": compute.loads,
                "compute_s": compute_s,
            }
        )
    links = sorted(
        {link for link, _ in pools if link not in ("compute",)}, key=lambda x: (x == "unshaped", x)
    )
    for link in links:
        rate = None if link == "unshaped" else link_bound.rate_bytes_per_s(link)
        medians = {}
        for (l, setting), pool in pools.items():
            if l != link:
                continue
            row = dict(pool.row)
            eps = _pooled_eps(pool, row)
            medians[setting] = eps
            row.update(
                link=link,
                setting=setting,
                median=eps,
                round_medians=pool.round_eps,
                load_avg_1m_rounds=pool.loads,
                tx_bytes_per_step=statistics.median(pool.tx),
            )
            if setting == "auto" and row.get("auto_picked"):
                summary[f"auto_picked_{link}"] = row["auto_picked"]
            payload_as = {"none": "defaults"}.get(row.get("auto_picked"), row.get("auto_picked"))
            if setting == "auto" and payload_as == "powersgd":
                payload_as = None  # its factors' bytes are not reported: no bound
            if rate and (setting != "auto" or payload_as):
                payload = link_bound.payload_bytes(
                    payload_as
                    if setting == "auto"
                    else link_bound.payload_kind(setting, SETTINGS[setting][1]),
                    row["params"],
                    row.get("sent_bytes_per_step"),
                )
                n = row.get("workers", 2)
                row.update(
                    link_bound.bound(
                        wire_bytes=payload * link_bound.bus_factor(n),
                        rate=rate,
                        compute_s=compute_s,
                        global_batch=row["global_batch"],
                        measured_eps=eps,
                    )
                )
                if setting in OURS and "link_fraction" in row:
                    summary[f"{setting}_link_fraction_{link}"] = row["link_fraction"]
            rows.append(row)
        peer = max((medians[p] for p in PEERS if p in medians), default=None)
        for setting, eps in medians.items():
            key = f"peer_{setting}" if setting in PEERS else setting
            summary[f"{key}_eps_{link}"] = eps
            if peer and setting in OURS:
                summary[f"{setting}_vs_peer_{link}"] = eps / peer
    unshaped = summary.get("powersgd_eps_unshaped")
    for link in links:
        if unshaped and f"powersgd_eps_{link}" in summary and link != "unshaped":
            summary[f"powersgd_vs_unshaped_{link}"] = summary[f"powersgd_eps_{link}"] / unshaped
    for link, sweep in sweeps.items():
        rate = link_bound.rate_bytes_per_s(link)
        for row in sweep:
            row.update(link=link, busbw_fraction=row["busbw_gbps"] * 1e9 / rate)
            rows.append(row)
        for prefix, setting in (("", "tf_default_fp32_tuned_malloc"), ("ours_", "ours_streams")):
            frac = link_bound.busbw_fraction(sweep, rate, setting=setting)
            if frac is not None:
                summary[f"{prefix}allreduce_busbw_fraction_4mb_plus_{link}"] = frac
    loads = [l for r in rows for l in r.get("load_avg_1m_rounds", [])]
    summary["load_avg_1m_max"] = max(loads) if loads else os.getloadavg()[0]
    return rows, summary


def _pooled_eps(pool, row) -> float:
    if not pool.windows:
        return statistics.median(pool.round_eps)
    items = row["global_batch"] * row.get("window_batches", 1)
    return common.summarize(pool.windows, items).median


def _raise_on_sigterm(signum, frame):  # pylint: disable=unused-argument
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    unknown = [s for s in _SETTINGS.value if s not in SETTINGS]
    if unknown or not _SETTINGS.value:
        raise app.UsageError(
            f"Invalid value for `--settings`: expected names "
            f"of {list(SETTINGS)}. Received: --settings="
            f"{','.join(_SETTINGS.value)}"
        )
    for link in _LINKS.value:
        try:
            link_bound.rate_bytes_per_s(link)
        except ValueError as e:
            raise app.UsageError(str(e).replace("`link`", "`--link`")) from None
    for name, value in (
        ("rounds", _ROUNDS.value),
        ("batch_size", _BATCH.value),
        ("num_batches", _BATCHES.value),
    ):
        if value < 1:
            raise app.UsageError(
                f"Invalid value for `--{name}`: expected a positive int. Received: --{name}={value}"
            )
    reason = testbed_lib.unavailable_reason()
    if reason:
        raise app.UsageError(f"link_speed needs emulated hosts: {reason}")
    signal.signal(signal.SIGTERM, _raise_on_sigterm)
    printer = lambda s: print(s, flush=True)  # noqa: E731
    started = time.perf_counter()
    tmp = tempfile.mkdtemp(prefix="tfdist_link_")
    beds = {}
    try:
        for link in _LINKS.value:
            beds[link] = testbed_lib.TestBed(2, rate=link)
        if _UNSHAPED.value and "powersgd" in _SETTINGS.value:
            beds["unshaped"] = testbed_lib.TestBed(2, rate=None)
        sweeps = {}
        if _SWEEP.value:
            for link in _LINKS.value:
                sweeps[link] = _sweep(beds[link], tmp, f"sweep_{link}")
                printer(f"sweep {link}: done (load {os.getloadavg()[0]:.1f})")
        pools = _measure(beds, list(_SETTINGS.value), tmp, printer)
    finally:
        for bed in beds.values():
            bed.close()
        import shutil  # pylint: disable=g-import-not-at-top

        shutil.rmtree(tmp, ignore_errors=True)
    rows, summary = _rows_and_summary(pools, sweeps)
    config = {
        **common.flag_config(),
        "settings": {s: " ".join(SETTINGS[s][1]) or SETTINGS[s][0] for s in _SETTINGS.value},
        "hosts": "2 emulated hosts (network namespaces on a bridge, "
        "tc tbf on both ends of each link, 198.18.0.10/.11), "
        "one worker each",
        "bound": "link_s = payload x 2(n-1)/n / link rate; bound step = "
        "max(compute alone, link_s); link_fraction = bound "
        "step / measured step",
    }
    common.write_report(
        "link_speed",
        config,
        rows,
        summary,
        output_json=common.OUTPUT_JSON.value,
        csv_path=common.CSV.value,
        plot_path=None,
    )
    for key, value in summary.items():
        printer(f"{key}: {value:.4g}" if isinstance(value, float) else f"{key}: {value}")
    printer(f"total wall time {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    app.run(main)
