"""GPU placement: which GPUs each task sees, decided once before anything starts.

One rule for every backend:

- The GPUs a launch may hand out are the ones it can see:
  `CUDA_VISIBLE_DEVICES` when set (ids or UUIDs, split as they are),
  otherwise the ones `nvidia-smi -L` lists (found without importing
  TensorFlow; no `nvidia-smi`: none).
- Training tasks (the chief and the workers) get disjoint, equal slices,
  in task order: with "0,1,2,3" and 2 workers, worker 0 sees "0,1" and
  worker 1 sees "2,3". `gpus_per_worker` K picks the slice size; without
  it every visible GPU is used (G / N each, which must divide). K = 0 hides
  every GPU (CPU only). N x K more than the visible GPUs is refused.
- Parameter servers get no GPU (`CUDA_VISIBLE_DEVICES=""`): they hold
  variables and apply updates on their CPU.
- The side-car evaluator gets its own slice of K when K GPUs are left after
  the training tasks' slices, otherwise none (it then evaluates on its CPU);
  it never shares a training task's GPUs.
- No GPU visible and no `gpus_per_worker`: nothing is placed and nothing is
  set (the CPU case, as before).

Ray assigns GPUs itself (`tfdist_opt.launch.ray_launch` asks it for K per
worker); SLURM gets `--gpus-per-task K` (`tfdist_opt.launch.remote`).
Pure Python.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from typing import Callable, Mapping, Sequence

from tfdist_opt.launch import layout as layout_lib
from tfdist_opt.launch.layout import GPU_ENV
from tfdist_opt.launch.layout import Task

_UUID = re.compile(r"(GPU|MIG)-[0-9A-Za-z][0-9A-Za-z/-]*")
_SMI_LINE = re.compile(r"^GPU (\d+):")
_TRAINING = ("chief", "worker")


def check_gpus_per_worker(value) -> int | None:
    """`--gpus-per-worker K`: None (not given) or an int >= 0."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(
            "Invalid value for `--gpus-per-worker`: expected an int "
            ">= 0 (0: CPU only). Received: --gpus-per-worker="
            f"{value!r}"
        )
    return value


def parse_visible(text: str) -> tuple[str, ...]:
    """`CUDA_VISIBLE_DEVICES` as a tuple of entries (ids or UUIDs).

    A negative index ends the list, as it does for CUDA: "-1" (the usual
    way to hide every GPU) is no GPU, "0,-1,2" is GPU 0 alone.

    Raises:
        ValueError: an entry is neither an int >= 0 nor a GPU/MIG UUID, or
            appears twice.
    """
    entries = tuple(e.strip() for e in text.split(",")) if text.strip() else ()
    for i, e in enumerate(entries):
        if re.fullmatch(r"-\d+", e):
            entries = entries[:i]
            break
    for e in entries:
        if not (e.isdigit() or _UUID.fullmatch(e)):
            raise ValueError(
                f"Invalid value for `{GPU_ENV}`: expected GPU indices >= 0 or "
                f"UUIDs (GPU-..., MIG-...), comma-separated. Received: "
                f"{GPU_ENV}={text!r} (entry {e!r})"
            )
    dupes = sorted({e for e in entries if entries.count(e) > 1})
    if dupes:
        raise ValueError(
            f"Invalid value for `{GPU_ENV}`: each GPU may appear once (the "
            f"launcher hands out disjoint slices). Received: {GPU_ENV}="
            f"{text!r} ({', '.join(dupes)} repeated)"
        )
    return entries


def discover(
    run: Callable[..., subprocess.CompletedProcess] = subprocess.run,
    which: Callable[[str], str | None] = shutil.which,
) -> tuple[str, ...]:
    """GPU indices `nvidia-smi -L` lists ("GPU 0: ..." lines); () without it."""
    if which("nvidia-smi") is None:
        return ()
    try:
        out = run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return ()
    if out.returncode != 0:
        return ()
    found = (_SMI_LINE.match(line.strip()) for line in out.stdout.splitlines())
    return tuple(m.group(1) for m in found if m)


def visible_gpus(
    env: Mapping[str, str], discover_fn: Callable[[], tuple[str, ...]] = discover
) -> tuple[tuple[str, ...], str]:
    """(GPUs the launch may hand out, where they were found)."""
    if GPU_ENV in env:
        return parse_visible(env[GPU_ENV]), GPU_ENV
    return tuple(discover_fn()), "nvidia-smi -L"


def place(
    tasks: Sequence[Task],
    gpus: Sequence[str],
    gpus_per_worker: int | None = None,
    source: str = GPU_ENV,
) -> tuple[list[tuple[str, ...] | None], str]:
    """Each task's GPUs, in task order, and the start line's account of them.

    Args:
        tasks: sequence of `Task` (roles in start order).
        gpus: the GPUs to hand out (`visible_gpus`).
        gpus_per_worker: int or None. K GPUs per training task; None: all
            of `gpus`, split equally.
        source: str. Where `gpus` came from, for the messages.

    Returns:
        (per-task GPU tuples, or None where nothing is set; a note).

    Raises:
        ValueError: K is not an int >= 0; the training tasks need more
            GPUs than there are; without K, the GPUs do not split equally.
    """
    k = check_gpus_per_worker(gpus_per_worker)
    gpus = tuple(gpus)
    trainers = [t for t in tasks if t.role in _TRAINING]
    n = len(trainers)
    if not gpus and k is None:
        return [None] * len(tasks), ""
    listed = ",".join(gpus)
    seen = (
        f"none found by {source}"
        if not gpus
        else f"{source}={listed}"
        if source == GPU_ENV
        else f"{source}: {listed}"
    )
    if k is None:
        if n and len(gpus) % n:
            raise ValueError(
                f"Invalid GPU split: {len(gpus)} GPU(s) ({seen}) do not divide "
                f"into equal slices for {n} training task(s). Received: "
                f"{n} task(s), {len(gpus)} GPU(s). Expected --gpus-per-worker K "
                f"with {n} x K <= {len(gpus)} (unused GPUs stay idle)."
            )
        k = len(gpus) // n if n else 0
    if n * k > len(gpus):
        raise ValueError(
            f"Invalid value for `--gpus-per-worker`: {n} training task(s) x {k} "
            f"GPU(s) need {n * k}, but {len(gpus)} are visible ({seen}). "
            f"Received: --gpus-per-worker={k}. Expected at most "
            f"{len(gpus) // n if n else 0}, or fewer workers."
        )
    out: list[tuple[str, ...] | None] = []
    parts = []
    next_gpu = 0
    for task in tasks:
        if task.role in _TRAINING or (task.role == "evaluator" and k and next_gpu + k <= len(gpus)):
            mine = gpus[next_gpu : next_gpu + k]
            next_gpu += k
        else:
            mine = ()
        out.append(mine)
        parts.append(f"{task.label} -> {','.join(mine) or 'none'}")
    idle = len(gpus) - next_gpu
    note = f"GPUs ({seen}): {'; '.join(parts)}" + (f"; {idle} unused" if idle else "")
    return out, note


def placed_layout(
    num_workers: int,
    num_ps: int = 0,
    evaluator: bool = False,
    gpus_per_worker: int | None = None,
    env: Mapping[str, str] | None = None,
    forward: Mapping[str, str] | None = None,
    discover_fn: Callable[[], tuple[str, ...]] = discover,
):
    """`local_layout` with each task's GPUs placed by the rule above.

    Args:
        env: mapping or None. The launcher's environment, read for
            `CUDA_VISIBLE_DEVICES`. Defaults to `os.environ`.
        forward: mapping or None. Variables set in every task.
        discover_fn: callable. Finds GPUs when `CUDA_VISIBLE_DEVICES` is
            unset (tests pass a stand-in). Defaults to `discover`.
    """
    check_gpus_per_worker(gpus_per_worker)
    plain = layout_lib.local_layout(num_workers, num_ps, evaluator)
    visible, source = visible_gpus(os.environ if env is None else env, discover_fn)
    per_task, note = place(plain.tasks, visible, gpus_per_worker, source)
    return layout_lib.local_layout(num_workers, num_ps, evaluator, forward, per_task, note)


def ray_request(
    gpus_per_worker: int | None, cluster_gpus: float, min_workers: int
) -> tuple[int, str]:
    """(GPUs each Ray worker asks for, the start line's note).

    Without `gpus_per_worker`: 1 per worker when the Ray cluster has GPUs,
    none otherwise. Ray then sets each worker's `CUDA_VISIBLE_DEVICES` to
    its own GPUs.

    Raises:
        ValueError: the workers need more GPUs than the cluster has (a named
            error now, instead of a wait for resources that never come).
    """
    k = check_gpus_per_worker(gpus_per_worker)
    have = int(cluster_gpus)
    why = "--gpus-per-worker"
    if k is None:
        k, why = (1 if have else 0), "the default when the Ray cluster has GPUs"
        if not have:
            return 0, ""
    if k * min_workers > have:
        raise ValueError(
            f"Invalid value for `--gpus-per-worker`: {min_workers} Ray worker(s) "
            f"x {k} GPU(s) need {k * min_workers}, but the Ray cluster has "
            f"{have} (ray.cluster_resources()). Received: --gpus-per-worker={k}. "
            f"Expected at most {have // min_workers if min_workers else 0}, or "
            "fewer workers."
        )
    if k == 0:
        return 0, f"GPUs: none per worker (CPU only; the cluster has {have})"
    return k, (
        f"GPUs: {k} per worker ({why}; the cluster has {have}; Ray "
        "sets each worker's CUDA_VISIBLE_DEVICES)"
    )
