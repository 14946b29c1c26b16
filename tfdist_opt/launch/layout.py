"""The task layout: which tasks a launch starts, their GPUs, the env they get.

A `Layout` is decided once, before anything starts, and every backend
starts what it says: the roles in start order (chief, workers, ps, then
the side-car evaluator), each task's GPUs (`CUDA_VISIBLE_DEVICES`), and
the environment forwarded to every task. Addresses are not part of it:
the local backend picks free ports for each attempt, Ray picks its own.
Pure Python.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Mapping, Sequence

ROLES = ("chief", "worker", "ps", "evaluator")  # start order
GPU_ENV = "CUDA_VISIBLE_DEVICES"


@dataclasses.dataclass(frozen=True)
class Task:
    """One task of a layout.

    Attributes:
        role: str. "chief", "worker", "ps" or "evaluator".
        index: int. The task's index within its role.
        gpus: tuple of str, or None. The GPU ids (or UUIDs) the task may
            see, written as its `CUDA_VISIBLE_DEVICES`; `()` hides every
            GPU (CPU only); None leaves the variable as the launcher has it.
    """

    role: str
    index: int
    gpus: tuple[str, ...] | None = None

    def __post_init__(self):
        if self.role not in ROLES:
            raise ValueError(
                f"Unrecognized task role: {self.role!r}. Expected one of {', '.join(ROLES)}."
            )

    @property
    def label(self) -> str:
        return f"{self.role} {self.index}"

    def apply_gpus(self, env: dict[str, str]) -> dict[str, str]:
        """Writes this task's `CUDA_VISIBLE_DEVICES` into `env` (if decided)."""
        if self.gpus is not None:
            env[GPU_ENV] = ",".join(self.gpus)
        return env


@dataclasses.dataclass(frozen=True)
class Layout:
    """The tasks of a launch, in start order, and what every task gets.

    Attributes:
        tasks: tuple of `Task`.
        env: mapping. Variables set in every task (beyond the backend's
            own: TF_CONFIG, the `TFDIST_LAUNCH_*` names).
        gpu_note: str. How the GPUs were split, for the start line ("" when
            the launch does not place GPUs).
        max_workers: int or None. Elastic launches (`-n MIN:MAX`, Ray):
            the most workers; the layout's workers are the fewest.
        gpus_per_worker: int or None. GPUs each worker asks its backend
            for where the backend assigns them itself (Ray); None: not asked.
    """

    tasks: tuple[Task, ...]
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)
    gpu_note: str = ""
    max_workers: int | None = None
    gpus_per_worker: int | None = None

    def count(self, role: str) -> int:
        return sum(1 for t in self.tasks if t.role == role)

    @property
    def training_tasks(self) -> tuple[Task, ...]:
        """The tasks of the training cluster (everything but the evaluator)."""
        return tuple(t for t in self.tasks if t.role != "evaluator")

    @property
    def has_evaluator(self) -> bool:
        return self.count("evaluator") > 0

    def cluster(self, addresses: Sequence[str]) -> dict[str, list[str]]:
        """{role: [address, ...]} with `addresses` given in task order."""
        if len(addresses) != len(self.tasks):
            raise ValueError(
                f"Invalid addresses: expected {len(self.tasks)} "
                f"(one per task). Received: {len(addresses)}"
            )
        out: dict[str, list[str]] = {}
        for task, address in zip(self.tasks, addresses):
            out.setdefault(task.role, []).append(address)
        return out


def local_layout(
    num_workers: int,
    num_ps: int = 0,
    evaluator: bool = False,
    env: Mapping[str, str] | None = None,
    gpus: Sequence[tuple[str, ...] | None] | None = None,
    gpu_note: str = "",
) -> Layout:
    """The tasks `tfdist-opt launch -n N [--ps K] [--evaluator]` starts.

    Args:
        num_workers: int. Workers (with `num_ps`, besides the chief).
        num_ps: int. Parameter servers; with K > 0 a chief comes first.
        evaluator: bool. A side-car evaluator, started last.
        env: mapping or None. Forwarded to every task.
        gpus: sequence or None. Each task's GPUs, in task order (see
            `tfdist_opt.launch.gpus.place`); None places none.
        gpu_note: str. The start line's account of the GPU split.
    """
    roles: list[tuple[str, int]] = []
    if num_ps:
        roles.append(("chief", 0))
    roles += [("worker", i) for i in range(num_workers)]
    roles += [("ps", i) for i in range(num_ps)]
    if evaluator:
        roles.append(("evaluator", 0))
    if gpus is None:
        gpus = [None] * len(roles)
    if len(gpus) != len(roles):
        raise ValueError(
            f"Invalid GPU placement: expected {len(roles)} entries "
            f"(one per task). Received: {len(gpus)}"
        )
    tasks = tuple(Task(role, index, g) for (role, index), g in zip(roles, gpus))
    return Layout(tasks, dict(env or {}), gpu_note)


def worker_layout(
    num_workers,
    env: Mapping[str, str] | None = None,
    gpus_per_worker: int | None = None,
    gpu_note: str = "",
) -> Layout:
    """Workers only, N or MIN:MAX (`launch --ray -n ...`): the fewest are
    the layout's tasks, the most its `max_workers`."""
    lo, hi = parse_workers(num_workers)
    return Layout(
        tuple(Task("worker", i) for i in range(lo)),
        dict(env or {}),
        gpu_note,
        max_workers=hi,
        gpus_per_worker=gpus_per_worker,
    )


def parse_workers(text) -> tuple[int, int | None]:
    """`-n N` or `-n MIN:MAX` → (N, None) or (MIN, MAX).

    Raises:
        ValueError: not a positive int / MIN:MAX with 1 <= MIN <= MAX.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        text = str(text)
    m = re.fullmatch(r"\s*(\d+)\s*(?::\s*(\d+)\s*)?", str(text))
    lo, hi = (int(m.group(1)), None if m.group(2) is None else int(m.group(2))) if m else (0, None)
    if not m or lo < 1 or (hi is not None and hi < lo):
        raise ValueError(
            "Invalid value for `-n`: expected a positive int N or "
            f"MIN:MAX with 1 <= MIN <= MAX. Received: -n {text}"
        )
    return lo, hi
