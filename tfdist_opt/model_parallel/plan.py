"""Pipeline placement decisions, in plain Python (no TensorFlow).

A pipeline is a list of contiguous layer groups ("stages"), one per device.
This module decides where the stage boundaries go (balanced by parameter
bytes, or where the user asks), which devices the stages get ("auto": the
visible GPUs, else the virtual CPUs), and validates micro-batch counts. The
TensorFlow binding (`pipeline.py`) holds the result.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

AUTO = "auto"


@dataclasses.dataclass(frozen=True)
class StagePlan:
    """Where a layer list is cut, and what each stage holds.

    Attributes:
        starts: tuple of int. Index of each stage's first layer (first is 0).
        num_layers: int. Layers in the whole model.
        stage_bytes: tuple of int. Parameter bytes per stage.
    """

    starts: tuple[int, ...]
    num_layers: int
    stage_bytes: tuple[int, ...]

    @property
    def num_stages(self) -> int:
        return len(self.starts)

    def ranges(self) -> list[tuple[int, int]]:
        """`[(start, end), ...]` half-open layer index ranges, one per stage."""
        ends = list(self.starts[1:]) + [self.num_layers]
        return list(zip(self.starts, ends))

    @property
    def largest_stage_fraction(self) -> float:
        """Largest stage's bytes over the model's (1/n is perfect balance)."""
        total = sum(self.stage_bytes)
        return max(self.stage_bytes) / total if total else 0.0


def _stage_bytes(sizes: Sequence[int], starts: Sequence[int]) -> tuple[int, ...]:
    ends = list(starts[1:]) + [len(sizes)]
    return tuple(sum(sizes[a:b]) for a, b in zip(starts, ends))


def balanced_split(layer_bytes: Sequence[int], num_stages: int) -> StagePlan:
    """Cuts a layer list into `num_stages` contiguous stages, balanced by bytes.

    Minimises the largest stage's parameter bytes (exact, by dynamic
    programming over cut points), with every stage holding at least one
    layer that has parameters. Parameter-free layers (activations, reshapes)
    join the stage before them where possible.

    Args:
        layer_bytes: sequence of int. Parameter bytes of each layer, in order.
        num_stages: int. Stages wanted (>= 1).

    Returns:
        A `StagePlan`.

    Raises:
        ValueError: `num_stages` < 1, or fewer layers with parameters than
            stages (some stage would hold no variables).

    Example:
        >>> balanced_split([4, 0, 4, 8], 2).starts
        (0, 3)
    """
    sizes = [int(b) for b in layer_bytes]
    if isinstance(num_stages, bool) or not isinstance(num_stages, int) or num_stages < 1:
        raise ValueError(
            "Invalid value for `num_stages`: expected an int >= 1. "
            f"Received: num_stages={num_stages!r}"
        )
    if any(b < 0 for b in sizes):
        raise ValueError(
            "Invalid value for `layer_bytes`: expected non-negative "
            f"ints. Received: layer_bytes={sizes}"
        )
    with_params = sum(1 for b in sizes if b > 0)
    if with_params < num_stages:
        raise ValueError(
            f"Cannot split the model into {num_stages} stages: only "
            f"{with_params} of its {len(sizes)} layers have variables, and every "
            "stage needs at least one (a stage with no variables has nothing to "
            f"place). Received: num_stages={num_stages}. Use at most "
            f"{with_params} stages."
        )
    n = len(sizes)
    prefix = [0]
    for b in sizes:
        prefix.append(prefix[-1] + b)
    inf = float("inf")
    # best[k][i]: minimal max-stage bytes splitting layers[:i] into k stages,
    # each holding a parameter layer; cut[k][i] the start of the k-th stage.
    best = [[inf] * (n + 1) for _ in range(num_stages + 1)]
    cut = [[0] * (n + 1) for _ in range(num_stages + 1)]
    best[0][0] = 0
    for k in range(1, num_stages + 1):
        for i in range(1, n + 1):
            for j in range(i - 1, -1, -1):  # stage k = layers[j:i]
                if best[k - 1][j] == inf or prefix[i] == prefix[j]:
                    continue
                cost = max(best[k - 1][j], prefix[i] - prefix[j])
                # Strict "<" walking j down keeps the latest start on ties,
                # so parameter-free layers join the stage before them.
                if cost < best[k][i]:
                    best[k][i], cut[k][i] = cost, j
    starts, i = [], n
    for k in range(num_stages, 0, -1):
        i = cut[k][i]
        starts.append(i)
    starts = tuple(reversed(starts))
    return StagePlan(starts, n, _stage_bytes(sizes, starts))


def split_at_names(
    layer_names: Sequence[str],
    layer_bytes: Sequence[int],
    split_at: Sequence[str],
    nested: dict[str, str] | None = None,
) -> StagePlan:
    """A `StagePlan` whose stages 2..n begin at the layers named in `split_at`.

    Args:
        layer_names: sequence of str. Top-level layer names, in order.
        layer_bytes: sequence of int. Their parameter bytes.
        split_at: sequence of str. Names of the layers that start a new stage.
        nested: dict or None. Names of layers inside nested models, mapped
            to the top-level layer holding them (for a clearer error).

    Raises:
        ValueError: a name that is not a top-level layer (or names the first
            layer, or repeats, or is out of order), or a stage with no
            variables.
    """
    names = list(layer_names)
    nested = nested or {}
    starts = [0]
    for name in split_at:
        if name not in names:
            where = (
                f"it is inside the nested layer {nested[name]!r}, which "
                "runs as a whole on one device"
                if name in nested
                else "no top-level layer has that name"
            )
            raise ValueError(
                f"Cannot split the model at layer {name!r}: {where}. Expected "
                f"one of the top-level layers {names[1:]}. Received: "
                f"split_at={list(split_at)!r}"
            )
        index = names.index(name)
        if index <= starts[-1]:
            raise ValueError(
                f"Cannot split the model at layer {name!r}: split points must be "
                "distinct, in model order, and not the first layer. Received: "
                f"split_at={list(split_at)!r}"
            )
        starts.append(index)
    plan = StagePlan(tuple(starts), len(names), _stage_bytes(list(layer_bytes), starts))
    for s, ((a, b), nbytes) in enumerate(zip(plan.ranges(), plan.stage_bytes)):
        if nbytes == 0:
            raise ValueError(
                f"Stage {s} (layers {names[a:b]}) has no variables; every stage "
                "needs at least one, or it has nothing to place. Move its split "
                f"point. Received: split_at={list(split_at)!r}"
            )
    return plan


def resolve_devices(
    devices: str | Sequence[str], num_stages: int, gpus: Sequence[str], cpus: Sequence[str]
) -> list[str]:
    """Device names for `num_stages` stages.

    Args:
        devices: `"auto"` or a sequence of device names. `"auto"` takes the
            first `num_stages` visible GPUs if there are any, else the
            logical CPUs (virtual CPUs made with `cpu_replicas`).
        num_stages: int. Stages to place.
        gpus: sequence of str. Visible logical GPU names.
        cpus: sequence of str. Visible logical CPU names.

    Raises:
        ValueError: more stages than devices, or an explicit list whose
            length is not the number of stages, or a repeated device.
        TypeError: `devices` neither `"auto"` nor a sequence of str.
    """
    if isinstance(devices, str):
        if devices != AUTO:
            raise ValueError(
                'Invalid value for `devices`: expected "auto" or a '
                f"list of device names. Received: devices={devices!r}"
            )
        pool, kind = (list(gpus), "GPU") if gpus else (list(cpus), "CPU")
        if num_stages > len(pool):
            raise ValueError(
                f"More stages than devices: {num_stages} stages but only "
                f"{len(pool)} visible {kind} device(s) {pool}. Use fewer stages, "
                "or (on CPU) more virtual devices with cpu_replicas. Received: "
                f"devices='auto', num_stages={num_stages}"
            )
        return pool[:num_stages]
    if not isinstance(devices, (list, tuple)) or not all(isinstance(d, str) for d in devices):
        raise TypeError(
            'Invalid type for `devices`: expected "auto" or a list '
            f"of str. Received: devices={devices!r}"
        )
    if num_stages > len(devices):
        raise ValueError(
            f"More stages than devices: {num_stages} stages but {len(devices)} "
            f"device(s). Received: devices={list(devices)!r}"
        )
    if num_stages < len(devices):
        raise ValueError(
            f"Invalid value for `devices`: expected one device per stage "
            f"({num_stages}). Received: devices={list(devices)!r}"
        )
    if len(set(devices)) != len(devices):
        raise ValueError(
            "Invalid value for `devices`: a device appears twice. "
            f"Received: devices={list(devices)!r}"
        )
    return list(devices)


def validate_micro_batches(micro_batches) -> int:
    """`micro_batches` as an int >= 1, or a ValueError naming it."""
    if isinstance(micro_batches, bool) or not isinstance(micro_batches, int) or micro_batches < 1:
        raise ValueError(
            "Invalid value for `micro_batches`: expected an int >= 1. "
            f"Received: micro_batches={micro_batches!r}"
        )
    return micro_batches


def micro_batch_bounds(batch: int, micro_batches: int) -> list[tuple[int, int]]:
    """Row ranges of `micro_batches` near-equal slices of a batch of `batch`."""
    return [
        (batch * m // micro_batches, batch * (m + 1) // micro_batches) for m in range(micro_batches)
    ]
