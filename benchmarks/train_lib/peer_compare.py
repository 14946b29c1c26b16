"""`--compare=peer|scaling`: ours against others, a fresh local cluster per run.

The Keras flavour is fixed when TensorFlow is imported and a process holds
one MultiWorkerMirroredStrategy, so no process can run both ours and a peer.
The invocation therefore coordinates instead of training: for each round it
starts, one after another, a local cluster of N workers
(`tfdist_opt.launch.local.run_local`, fresh ports each time) running
this binary again with `--peer_role=ours|tf_keras|keras3_ctl` and the
per-round batch count; the order rotates every round, so load changes and
position effects fall on every setting alike. Each child writes its raw
window durations to a JSON file; the coordinator pools them per setting.

N is the launch's worker count under `tfdist-opt launch -n N` (worker 0
coordinates and keeps its TF port open so the launcher counts it as joined;
the other workers exit at once) or `--peer_workers` without TF_CONFIG.

`--compare=cpu_split` is `scaling` with a third role, ours with
`--cpu_split=pin` (each worker pinned to its own cores); summary keys
`fraction_of_one_process_pin`, `epoch_spread_ratio_pin`.

`--compare=scaling` runs the same way with two roles: ours on N workers,
and `one_process`: this binary in one process on the same cores (no
TF_CONFIG, no StrategyConfig flags: plain one-device Keras `fit`) with a
per-replica batch N times larger, so the global batch, model, data and
compile are the same. It is the limit data parallelism on one host chases.

Summary keys, peer: `opt_eps`, `peer_tf_keras_eps`, `peer_keras3_ctl_eps`,
`speedup_vs_tf_keras`, `speedup_vs_keras3_ctl`, and `speedup_vs_peer` (ours
over the faster peer); `overlap_fraction` when ours measured it. Scaling:
`opt_eps`, `one_process_eps`, `fraction_of_one_process` (ours / one
process). Both: `round_spread_<role>` (slowest / fastest round median);
with `--epochs` > 1 `epoch_spread_<role>` (slowest / fastest epoch over all
rounds) and, scaling, `epoch_spread_ratio` (ours / one process); with
`--breakdown_steps` each row's `step_breakdown_rounds` (train_lib/breakdown.py)
and `breakdown_step_ms_<role>`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import socket
import sys
import tempfile

from absl import app
from absl import flags

from benchmarks import common
from benchmarks.train_lib import peers

ROLES = ("ours",) + peers.PEERS


@dataclasses.dataclass(frozen=True)
class Role:
    """One measured run kind: which child, on how many workers, which flags."""

    name: str  # the row's role
    peer_role: str  # the child's --peer_role
    workers: int
    extra_flags: tuple = ()
    strategy_flags: bool = True  # forward the StrategyConfig flags


def roles_for(compare: str, n: int, batch_size: int) -> list[Role]:
    """The roles a comparison alternates (lookup table; unknown names listed)."""
    table = {
        "peer": lambda: [Role(r, r, n) for r in ROLES],
        "scaling": lambda: [
            Role("ours", "ours", n),
            Role(
                "one_process", "ours", 1, (f"--batch_size={batch_size * n}",), strategy_flags=False
            ),
        ],
        "cpu_split": lambda: [
            Role("ours", "ours", n),
            Role("ours_pin", "ours", n, ("--cpu_split=pin",)),
            Role(
                "one_process", "ours", 1, (f"--batch_size={batch_size * n}",), strategy_flags=False
            ),
        ],
    }
    if compare not in table:
        raise ValueError(f"Unrecognized comparison: {compare!r}. Expected one of {sorted(table)}.")
    return table[compare]()


def _strategy_flag_names() -> set[str]:
    from tfdist_opt.strategy import config as config_lib  # pylint: disable=g-import-not-at-top

    return {"config"} | {f.name for f in dataclasses.fields(config_lib.StrategyConfig)}


# Flags the coordinator sets per child (or that only it reads).
_NOT_FORWARDED = {
    "compare",
    "rounds",
    "num_batches",
    "output_json",
    "csv",
    "plot",
    "peer_role",
    "peer_workers",
}
_LAUNCH_ENV = (
    "TF_CONFIG",
    "TFDIST_LAUNCH_RESTART_COUNT",
    "TFDIST_LAUNCH_WORKER_INDEX",
    "TFDIST_LAUNCH_NUM_WORKERS",
    "TF_USE_LEGACY_KERAS",
)


def forwarded_flags(
    strategy_flags: bool = True, overridden: tuple = (), flag_values=None
) -> list[str]:
    """Every flag the user set, serialized, except the coordinator's own.

    Args:
        strategy_flags: bool. Also forward `--config` and the StrategyConfig
            flags. Defaults to `True`.
        overridden: flags the caller passes itself (`--name=value`); any
            user value of those names is dropped.
        flag_values: absl `FlagValues`. Defaults to `flags.FLAGS`.
    """
    fv = flags.FLAGS if flag_values is None else flag_values
    skip = set(_NOT_FORWARDED) | {f[2:].split("=", 1)[0] for f in overridden}
    if not strategy_flags:
        skip |= _strategy_flag_names()
    seen, out = set(), []
    for name in list(fv):
        flag = fv[name]
        if id(flag) in seen or flag.name in skip or not flag.present:
            continue
        seen.add(id(flag))
        out.append(flag.serialize())
    return out


def cluster_size(peer_workers: int, environ=None) -> int:
    """Workers per child cluster; TF_CONFIG must come from a local launch."""
    environ = os.environ if environ is None else environ
    if not environ.get("TF_CONFIG"):
        return peer_workers
    if "TFDIST_LAUNCH_NUM_WORKERS" not in environ:
        raise app.UsageError(
            "Invalid environment for `--compare=peer`: it starts its own local "
            "clusters, so it runs under `tfdist-opt launch -n N` or without "
            "TF_CONFIG (with --peer_workers=N). Received: a TF_CONFIG not set "
            "by tfdist-opt launch"
        )
    return common.num_workers(environ)


def _hold_own_port(environ) -> socket.socket | None:
    """Listens on this task's TF_CONFIG port (the launcher's join check)."""
    from tfdist_opt.cluster import tf_config as tf_config_lib  # pylint: disable=g-import-not-at-top

    cfg = tf_config_lib.tf_config_from_env(environ)
    if not cfg:
        return None
    task = cfg["task"]
    port = int(cfg["cluster"][task["type"]][task["index"]].rsplit(":", 1)[1])
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", port))
    sock.listen(8)
    return sock


def coordinate(
    args,
    *,
    peer_workers: int,
    printer,
    binary: str,
    startup_timeout_s: float = 600.0,
    flag_values=None,
):
    """Runs every role once per round; returns (rows, summary, config)."""
    from tfdist_opt.launch import local as launcher  # pylint: disable=g-import-not-at-top

    compare = getattr(args, "compare", "peer")
    if compare == "peer" and args.model == "transformer":
        raise app.UsageError(
            "Invalid value for `--model` with --compare=peer: "
            "the tf_keras peer cannot build it (keras.ops). "
            "Expected mlp, cnn_small or resnet50. "
            "Received: --model=transformer"
        )
    n = cluster_size(peer_workers)
    if not common.is_chief():
        print(f"--compare={compare}: worker 0 runs the clusters; nothing to do here", flush=True)
        return None
    roles = roles_for(compare, n, getattr(args, "batch_size", 0))
    names = tuple(role.name for role in roles)
    held = _hold_own_port(os.environ)
    base_env = {k: v for k, v in os.environ.items() if k not in _LAUNCH_ENV}
    tmp = tempfile.mkdtemp(prefix="tfdist_peer_")
    durations = {role: [] for role in names}
    last_rows, wall, round_medians = {}, dict.fromkeys(names, 0.0), {role: [] for role in names}
    loads = {role: [] for role in names}  # 1-min load average after each run
    epoch_eps = {role: [] for role in names}  # --epochs > 1
    parts = {role: [] for role in names}  # --breakdown_steps, per round
    try:
        for r in range(args.rounds):
            order = roles[r % len(roles) :] + roles[: r % len(roles)]
            for spec in order:
                role = spec.name
                out = os.path.join(tmp, f"{role}_{r}.json")
                log_path = os.path.join(tmp, f"{role}_{r}.log")
                argv = [
                    sys.executable,
                    binary,
                    *forwarded_flags(spec.strategy_flags, spec.extra_flags, flag_values),
                    *spec.extra_flags,
                    f"--peer_role={spec.peer_role}",
                    f"--num_batches={args.per_round}",
                    f"--output_json={out}",
                ]
                printer(f"round {r + 1}/{args.rounds}: {role} on {spec.workers} worker(s)")
                env = {
                    k: v
                    for k, v in base_env.items()
                    if spec.strategy_flags or not k.startswith("TFDIST_OPT_")
                }
                with open(log_path, "w") as log:
                    result = launcher.run_local(
                        argv,
                        spec.workers,
                        env={**env, **peers.env_for(spec.peer_role)},
                        stdout=log,
                        stderr=log,
                        startup_timeout=startup_timeout_s,
                    )
                if result.returncode != 0:
                    with open(log_path) as log:
                        tail = log.read()[-6000:]
                    raise RuntimeError(
                        f"--compare={compare}: the {role} run of "
                        f"round {r + 1} failed ({result.message}); "
                        f"its output ends:\n{tail}"
                    )
                with open(out) as f:
                    child = json.load(f)
                row = child["results"][0]
                loads[role].append(child["environment"]["load_avg_1m"])
                durations[role] += row.pop("window_durations_s")
                epoch_eps[role] += row.pop("epoch_eps", None) or []
                row.pop("epoch_spread", None)
                if row.get("step_breakdown"):
                    parts[role].append(row["step_breakdown"])
                wall[role] += row["wall_s"]
                round_medians[role].append(round(row["median"], 2))
                printer(f"  {row['setting']}: {row['median']:.1f} images/sec")
                last_rows[role] = row
    finally:
        if held is not None:
            held.close()
        shutil.rmtree(tmp, ignore_errors=True)
    rows, medians = [], {}
    for role in names:
        row = last_rows[role]
        stats = common.summarize(durations[role], row["global_batch"] * row["window_batches"])
        row.update(
            stats.to_dict(),
            wall_s=wall[role],
            rounds=args.rounds,
            timed_batches=args.per_round * args.rounds,
            round_medians=round_medians[role],
            load_avg_1m_rounds=loads[role],
            round_spread=round_spread(round_medians[role]),
            peer=_DOC.get(role, peers.DOC.get(role)),
        )
        if epoch_eps[role]:
            row.update(epoch_eps=epoch_eps[role], epoch_spread=round_spread(epoch_eps[role]))
        if parts[role]:
            row.update(step_breakdown_rounds=parts[role])
        row["setting"] = {
            "one_process": "one_process",
            "ours_pin": "ours_pin",
        }.get(role, row["setting"])
        medians[role] = stats.median
        rows.append(row)
    if compare in ("scaling", "cpu_split"):
        summary = scaling_summary(medians)
        if "ours_pin" in medians:
            summary["fraction_of_one_process_pin"] = medians["ours_pin"] / medians["one_process"]
    else:
        summary = peer_summary(medians, rows[0].get("overlap_fraction"))
    summary.update(
        {f"round_spread_{row_role}": row["round_spread"] for row_role, row in zip(names, rows)}
    )
    summary.update(extra_summary(names, rows))
    sizes = ", ".join(f"{s.name}: {s.workers} worker(s)" for s in roles)
    config = {
        "peers": {r: _DOC.get(r, peers.DOC.get(r)) for r in names},
        "comparison": (
            f"one fresh local cluster per setting per round ({sizes}); "
            f"{args.rounds} round(s) of {args.per_round} timed batches each (after "
            f"{args.warmup} warm-up batches), the order rotated every round"
        ),
    }
    return rows, summary, config


_DOC = {
    "ours": "tfdist_opt.opt_strategy() + fit",
    "ours_pin": "ours with --cpu_split=pin: each worker pinned to its "
    "own slice of the cores, pools sized to it",
    "one_process": "the same model, data, compile and global batch in one "
    "process on the same cores: plain Keras fit, no "
    "TF_CONFIG, StrategyConfig defaults",
}


def round_spread(round_medians: list[float]) -> float | None:
    """Slowest over fastest round median (1.0: steady), None without rounds."""
    if not round_medians or max(round_medians) <= 0:
        return None
    return min(round_medians) / max(round_medians)


def extra_summary(names, rows) -> dict[str, float]:
    """`epoch_spread_<role>` (and `epoch_spread_ratio`: ours over one
    process) with `--epochs` > 1; `breakdown_step_ms_<role>` (median traced
    step over rounds) with `--breakdown_steps`."""
    import statistics  # pylint: disable=g-import-not-at-top

    out = {}
    for role, row in zip(names, rows):
        if row.get("epoch_spread") is not None:
            out[f"epoch_spread_{role}"] = row["epoch_spread"]
        if row.get("step_breakdown_rounds"):
            out[f"breakdown_step_ms_{role}"] = statistics.median(
                b["step_ms"] for b in row["step_breakdown_rounds"]
            )
    if out.get("epoch_spread_one_process"):
        for role in names:
            if role != "one_process" and f"epoch_spread_{role}" in out:
                suffix = "" if role == "ours" else "_" + role.removeprefix("ours_")
                out["epoch_spread_ratio" + suffix] = (
                    out[f"epoch_spread_{role}"] / out["epoch_spread_one_process"]
                )
    return out


def scaling_summary(medians: dict[str, float]) -> dict[str, float]:
    return {
        "opt_eps": medians["ours"],
        "one_process_eps": medians["one_process"],
        "fraction_of_one_process": medians["ours"] / medians["one_process"],
    }


def peer_summary(medians: dict[str, float], overlap=None) -> dict[str, float]:
    ours = medians["ours"]
    summary = {"opt_eps": ours}
    for role in peers.PEERS:
        summary[f"peer_{role}_eps"] = medians[role]
        summary[f"speedup_vs_{role}"] = ours / medians[role]
    summary["speedup_vs_peer"] = ours / max(medians[r] for r in peers.PEERS)
    if overlap is not None:
        summary["overlap_fraction"] = overlap
    return summary
