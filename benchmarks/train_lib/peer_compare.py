"""`--compare=peer`: ours against the peers, one fresh local cluster per run.

The Keras flavour is fixed when TensorFlow is imported and a process holds
one MultiWorkerMirroredStrategy, so no process can run both ours and a peer.
The invocation therefore coordinates instead of training: for each round it
starts, one after another, a local cluster of N workers
(`tfdist_opt.cluster.launcher.run_local`, fresh ports each time) running
this binary again with `--peer_role=ours|tf_keras|keras3_ctl` and the
per-round batch count; the order rotates every round, so load changes and
position effects fall on every setting alike. Each child writes its raw
window durations to a JSON file; the coordinator pools them per setting.

N is the launch's worker count under `tfdist-opt launch -n N` (worker 0
coordinates and keeps its TF port open so the launcher counts it as joined;
the other workers exit at once) or `--peer_workers` without TF_CONFIG.

Summary keys: `opt_eps`, `peer_tf_keras_eps`, `peer_keras3_ctl_eps`,
`speedup_vs_tf_keras`, `speedup_vs_keras3_ctl`, and `speedup_vs_peer` (ours
over the faster peer); `overlap_fraction` when ours measured it.
"""

from __future__ import annotations

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
# Flags the coordinator sets per child (or that only it reads).
_NOT_FORWARDED = {"compare", "rounds", "num_batches", "output_json", "csv",
                  "plot", "peer_role", "peer_workers"}
_LAUNCH_ENV = ("TF_CONFIG", "TFDIST_LAUNCH_RESTART_COUNT",
               "TFDIST_LAUNCH_WORKER_INDEX", "TFDIST_LAUNCH_NUM_WORKERS",
               "TF_USE_LEGACY_KERAS")


def forwarded_flags() -> list[str]:
    """Every flag the user set, serialized, except the coordinator's own."""
    seen, out = set(), []
    for name in list(flags.FLAGS):
        flag = flags.FLAGS[name]
        if id(flag) in seen or flag.name in _NOT_FORWARDED or not flag.present:
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
            "by tfdist-opt launch")
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


def coordinate(args, *, peer_workers: int, printer, binary: str,
               startup_timeout_s: float = 600.0):
    """Runs every role once per round; returns (rows, summary, config)."""
    from tfdist_opt.cluster import launcher  # pylint: disable=g-import-not-at-top

    if args.model == "transformer":
        raise app.UsageError("Invalid value for `--model` with --compare=peer: "
                             "the tf_keras peer cannot build it (keras.ops). "
                             "Expected mlp, cnn_small or resnet50. "
                             "Received: --model=transformer")
    n = cluster_size(peer_workers)
    if not common.is_chief():
        print("--compare=peer: worker 0 runs the clusters; nothing to do here",
              flush=True)
        return None
    held = _hold_own_port(os.environ)
    base_env = {k: v for k, v in os.environ.items() if k not in _LAUNCH_ENV}
    tmp = tempfile.mkdtemp(prefix="tfdist_peer_")
    flags_out = forwarded_flags()
    durations = {role: [] for role in ROLES}
    last_rows, wall, round_medians = {}, dict.fromkeys(ROLES, 0.0), {
        role: [] for role in ROLES}
    loads = {role: [] for role in ROLES}  # 1-min load average after each run
    try:
        for r in range(args.rounds):
            order = ROLES[r % len(ROLES):] + ROLES[:r % len(ROLES)]
            for role in order:
                out = os.path.join(tmp, f"{role}_{r}.json")
                log_path = os.path.join(tmp, f"{role}_{r}.log")
                argv = [sys.executable, binary, *flags_out,
                        f"--peer_role={role}", f"--num_batches={args.per_round}",
                        f"--output_json={out}"]
                printer(f"round {r + 1}/{args.rounds}: {role} on {n} worker(s)")
                with open(log_path, "w") as log:
                    result = launcher.run_local(
                        argv, n, env={**base_env, **peers.env_for(role)},
                        stdout=log, stderr=log, startup_timeout=startup_timeout_s)
                if result.returncode != 0:
                    with open(log_path) as log:
                        tail = log.read()[-6000:]
                    raise RuntimeError(f"--compare=peer: the {role} run of round "
                                       f"{r + 1} failed ({result.message}); its "
                                       f"output ends:\n{tail}")
                with open(out) as f:
                    child = json.load(f)
                row = child["results"][0]
                loads[role].append(child["environment"]["load_avg_1m"])
                durations[role] += row.pop("window_durations_s")
                wall[role] += row["wall_s"]
                round_medians[role].append(round(row["median"], 2))
                printer(f"  {row['setting']}: {row['median']:.1f} images/sec")
                last_rows[role] = row
    finally:
        if held is not None:
            held.close()
        shutil.rmtree(tmp, ignore_errors=True)
    rows, medians = [], {}
    for role in ROLES:
        row = last_rows[role]
        stats = common.summarize(durations[role], row["global_batch"]
                                 * row["window_batches"])
        row.update(stats.to_dict(), wall_s=wall[role], rounds=args.rounds,
                   timed_batches=args.per_round * args.rounds,
                   round_medians=round_medians[role],
                   load_avg_1m_rounds=loads[role],
                   peer=peers.DOC.get(role, "tfdist_opt.opt_strategy() + fit"))
        medians[role] = stats.median
        rows.append(row)
    summary = peer_summary(medians, rows[0].get("overlap_fraction"))
    config = {"peers": peers.DOC, "comparison": (
        f"one fresh local cluster of {n} worker(s) per setting per round; "
        f"{args.rounds} round(s) of {args.per_round} timed batches each (after "
        f"{args.warmup} warm-up batches), the order rotated every round")}
    return rows, summary, config


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
