"""`tfdist-opt info`: versions, devices, and what `opt_strategy()` would build.

Builds nothing and starts no server: it runs the same pure decision
(`plan_strategy`) that `opt_strategy()` runs, on this process's environment.

Quiet by default, as `tfdist-opt launch` is: TensorFlow prints about six C++
lines when it starts (oneDNN, cuda stubs, absl's pre-init notice, a failed
cuInit on a host without an NVIDIA driver), some before it reads
`TF_CPP_MIN_LOG_LEVEL`. So `info` runs itself once more as a child with
`--verbose` and the launcher's quiet environment, and passes the child's
stderr through the launcher's filter (`tfdist_opt.launch.log_filter`);
stdout, tracebacks and warnings pass unchanged. `--verbose` (or a process
that already imported TensorFlow, which prints nothing more) runs in this
process, unfiltered.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from typing import Any

from tfdist_opt import versions
from tfdist_opt.launch import env_forward
from tfdist_opt.launch import log_filter
from tfdist_opt.strategy import config as config_lib
from tfdist_opt.strategy.devices import cpu_split
from tfdist_opt.strategy import plan as plan_lib
from tfdist_opt.strategy import topology as topology_lib


def collect(config_path: str | None = None) -> dict[str, Any]:
    """Everything `info` reports, as a dict (JSON-serialisable)."""
    import tensorflow as tf

    if versions.uses_legacy_keras():
        import tf_keras as keras_module

        keras_name = "tf_keras"
    else:
        import keras as keras_module

        keras_name = "keras"
    out: dict[str, Any] = {
        "python": platform.python_version(),
        "tensorflow": tf.__version__,
        "keras": f"{keras_name} {keras_module.__version__}",
        "devices": {
            "CPU": len(tf.config.list_physical_devices("CPU")),
            "GPU": [d.name for d in tf.config.list_physical_devices("GPU")],
        },
        "built_with_cuda": tf.test.is_built_with_cuda(),
        "presets": [str(p) for p in config_lib.list_presets()],
        "tested_set": _tested_set(),
        "launch_forwards": launch_forwards(os.environ),
    }
    try:
        cfg = config_lib.StrategyConfig.load(config_path)
        topo = topology_lib.detect_topology()
        out["config"] = cfg.to_dict()
        out["tf_config_role"] = (
            None
            if topo.tf_config is None
            else {
                "task_type": topo.task_type,
                "task_index": topo.task_index,
                "num_workers": topo.num_workers,
                "is_chief": topo.is_chief,
            }
        )
        plan = plan_lib.plan_strategy(cfg, topo)
        out["strategy"] = {
            "kind": plan.kind,
            "devices": list(plan.devices),
            "replicas_here": plan.num_local_replicas,
            "replicas_in_sync": plan.num_local_replicas * topo.num_workers,
            "collective_implementation": plan.all_reduce,
            "why": list(plan.reasons),
            "warnings": list(plan.warnings),
            "settings": dict(plan.settings),
            "gpu_memory_growth": plan.gpu_memory_growth,
            "gpu_memory": plan.gpu_memory,
        }
        out["gradients"] = plan.gradients.to_dict()
        if plan.kind == "multi_worker":
            out["cpu_split"] = cpu_split.detect(cfg.cpu_split, topo.tf_config).reason
    except ValueError as e:
        out["error"] = str(e)
    return out


# Set by `_run_quiet` in its child when it (not the user) set the child's
# TF_CPP_MIN_LOG_LEVEL; neither TFDIST_OPT_* nor TF_*, so never forwarded.
_QUIET_SET_ENV = "_TFDIST_INFO_SET_LOG_LEVEL"


def launch_forwards(environ) -> list[str]:
    """Names of the variables `tfdist-opt launch` would forward to every task.

    The launcher's rule (`tfdist_opt.launch.env_forward`): its `TFDIST_OPT_*`
    and `TF_*` variables but `TF_CONFIG`, on every backend and node; `--env`
    adds more. A level `info` set for its own quiet child is not the user's.
    """
    names = sorted(env_forward.forwarded(environ))
    if environ.get(_QUIET_SET_ENV) == "1":
        names = [n for n in names if n != log_filter.TF_LOG_LEVEL_ENV]
    return names


def _forwards_line(names: list[str]) -> str:
    rule = "TFDIST_OPT_* and TF_* but TF_CONFIG; --env NAME[=VALUE] adds more"
    if not names:
        return f"launch env   : none set here to forward ({rule})"
    return f"launch env   : forwards {', '.join(names)} to every task ({rule})"


_SAVING = {
    "auto": "storage_sharing=auto: per directory, a probe finds which workers "
    "share it; one writer per shared storage, a private disk keeps its own copy",
    "shared": "storage_sharing=shared: every worker sees one storage; only the chief writes",
    "per_worker": "storage_sharing=per_worker: every worker writes its own copy",
}


def format_text(info: dict[str, Any]) -> str:
    lines = [
        f"tfdist_opt   : Python {info['python']}, TensorFlow {info['tensorflow']}, {info['keras']}",
        f"devices      : {info['devices']['CPU']} CPU, {len(info['devices']['GPU'])} GPU"
        + (f" ({', '.join(info['devices']['GPU'])})" if info["devices"]["GPU"] else "")
        + ("" if info["built_with_cuda"] else " (TensorFlow built without CUDA)"),
    ]
    if "tested_set" in info:
        lines.append(_tested_set_line(info["tested_set"]))
    if "launch_forwards" in info:
        lines.append(_forwards_line(info["launch_forwards"]))
    if "error" in info:
        lines.append(f"error        : {info['error']}")
        return "\n".join(lines)
    role = info["tf_config_role"]
    lines.append(
        "TF_CONFIG    : "
        + (
            "not set (single process)"
            if role is None
            else f"{role['task_type']}:{role['task_index']} (side-car, outside the "
            "training cluster)"
            if role["task_type"] == "evaluator"
            else f"{role['task_type']}:{role['task_index']} of {role['num_workers']} task(s)"
            + (" (chief)" if role["is_chief"] else "")
        )
    )
    s = info["strategy"]
    settings = s.get("settings") or {}
    if "variable_partitioning" in settings:  # parameter_server
        counts = settings["counts"]
        lines += [
            f"strategy     : {s['kind']}: {counts['worker']} worker(s) step "
            f"asynchronously, variables on {counts['ps']} ps task(s), the chief coordinates",
            "collectives  : none (gradients go to the ps tasks, no all-reduce)",
            "why          : " + "; ".join(s["why"]),
        ]
        lines.append(f"this task    : {settings['task']}: {settings['role']}")
        lines.append(f"partitioning : {settings['variable_partitioning']}")
    else:
        lines += [
            f"strategy     : {s['kind']} over {', '.join(s['devices'])} "
            f"({s['replicas_in_sync']} replica(s) in sync)",
            f"collectives  : {_collectives(s, info.get('config') or {}, info.get('gradients'))}",
            "why          : " + "; ".join(s["why"]),
        ]
    if s.get("gpu_memory"):
        lines.append(f"gpu memory   : {s['gpu_memory']}")
    lines += _plan_lines(info.get("gradients"))
    grads = _gradients_line(info.get("config") or {})
    if grads:
        lines.append(f"gradients    : {grads}")
    if info.get("cpu_split"):
        lines.append(f"cpu threads  : {info['cpu_split']} (cpu_split)")
    if s["kind"] == "multi_worker":
        lines.append(f"stalls       : {_stalls_line(info.get('config') or {})}")
    if (info.get("config") or {}).get("shard_optimizer_state"):
        lines.append(
            f"optimizer    : state sharded, 1/{s['replicas_in_sync']} of "
            "each slot per replica (shard_optimizer_state)"
        )
    lines += [f"warning      : {w}" for w in s["warnings"]]
    sharing = (info.get("config") or {}).get("storage_sharing")
    if sharing and role is not None:
        lines.append("saving       : " + _SAVING.get(sharing, sharing))
    lines.append(
        "presets      : " + (", ".join(os.path.basename(p) for p in info["presets"]) or "none")
    )
    return "\n".join(lines)


_COLLECTIVES = {
    ("mirrored", "nccl"): "nccl (NcclAllReduce: NCCL among this process's GPUs, no gRPC)",
    ("mirrored", "hierarchical_copy"): "hierarchical_copy (copies between GPUs, summed on one)",
    ("multi_worker", "nccl"): "nccl (collective ops: NCCL across the workers' "
    "GPUs, set up through the coordination service)",
    ("multi_worker", "ring"): "ring (collective ops over gRPC)",
}


def _collectives(s: dict[str, Any], cfg: dict[str, Any], grads: dict | None) -> str:
    """The collective implementation, and how it moves the gradients (the plan's streams)."""
    impl = s["collective_implementation"]
    if impl is None:
        return "none (one device)"
    line = _COLLECTIVES.get((s["kind"], impl), impl)
    if s["kind"] == "multi_worker" and grads is not None:
        streams = grads["streams"]
        line += (
            f"; gradients in pieces of {cfg['collective_piece_bytes']} bytes, "
            f"{streams} in flight (collective_streams)"
            if streams
            else "; gradients one collective per pack, in turn (collective_streams=0"
            + (" with bytes_per_pack set)" if cfg.get("bytes_per_pack") else ")")
        )
    return line


def _tested_set() -> dict[str, Any]:
    """The installed TensorFlow / Keras / tf-keras against the tested set."""
    installed = versions.installed_versions()
    why = versions.check(installed)
    return {
        "tested": versions.tested_set(),
        "installed": {pkg: f"{dist} {ver}" for pkg, (dist, ver) in installed.items()},
        "outside": {
            pkg: f"{' '.join(installed[pkg])} ({reason})" for pkg, reason in why.items() if reason
        },
    }


def _tested_set_line(tested: dict[str, Any]) -> str:
    found = ", ".join(tested["installed"].values())
    if not tested["outside"]:
        return f"tested set   : yes ({found}); tested: {tested['tested']}"
    return f"tested set   : no: {', '.join(tested['outside'].values())}; tested: {tested['tested']}"


def _stalls_line(cfg: dict[str, Any]) -> str:
    """What the stall inspector does with this config (`tfdist_opt.stall`)."""
    from tfdist_opt.stall import STALL_EXIT_CODE

    warn, abort = cfg.get("stall_warn_s"), cfg.get("stall_abort_s")
    if not warn:
        return "inspector off (stall_warn_s=0 or None): a stuck worker hangs the job"
    return (
        f"a worker behind for {warn:g} s is named with its stack, every "
        f"{warn:g} s (stall_warn_s); "
        + (
            f"abort after {abort:g} s, exit code {STALL_EXIT_CODE} (stall_abort_s)"
            if abort
            else "never aborted (stall_abort_s off)"
        )
    )


def _plan_lines(grads: dict | None) -> list[str]:
    """The gradient plan: the path, its stages in order, and why."""
    if grads is None:
        return []
    lines = [f"grad path    : {grads['path']}: {grads['what']}"]
    if grads["stages"]:
        lines.append("grad stages  : " + " -> ".join(grads["stages"]))
    lines.append("grad why     : " + "; ".join(grads["why"]))
    return lines


def _gradients_line(cfg: dict[str, Any]) -> str | None:
    """What the gradient path does with this config, when not the default."""
    from tfdist_opt.gradients.powersgd import powersgd

    if cfg.get("compression") == "powersgd":
        return powersgd.describe_settings(
            cfg["powersgd_rank"],
            cfg["powersgd_start_step"],
            cfg["powersgd_min_compression"],
            cfg["powersgd_wire"],
        )
    return None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tfdist-opt info",
        description="Show versions, devices, TF_CONFIG role and the strategy "
        "opt_strategy() would build here, and why.",
    )
    parser.add_argument("--config", help="config file or preset name (configs/)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument(
        "--verbose", action="store_true", help="also show TensorFlow's C++ start-up lines"
    )
    return parser


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    if not args.verbose and "tensorflow" not in sys.modules:
        return _run_quiet(list(argv))
    info = collect(args.config)
    print(json.dumps(info, indent=2) if args.json else format_text(info))
    return 1 if "error" in info else 0


def _run_quiet(argv: list[str], timeout_s: float = 300.0) -> int:
    """`info ARGV --verbose` in a child, its start-up noise filtered out."""
    env, level_set = log_filter.quiet_env(os.environ)
    if level_set:
        env[_QUIET_SET_ENV] = "1"
    keep = log_filter.StartupNoiseFilter(log_filter.min_log_level(env))
    proc = subprocess.Popen(
        [sys.executable, "-m", "tfdist_opt", "info", *argv, "--verbose"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        err += f"tfdist-opt info: no answer within {timeout_s:g} s; stopped.\n"
    sys.stdout.write(out)
    sys.stderr.write("".join(line for line in err.splitlines(keepends=True) if keep(line)))
    sys.stdout.flush()
    return proc.returncode if proc.returncode is not None else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
