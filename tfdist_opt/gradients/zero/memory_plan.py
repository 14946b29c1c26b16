"""What fits: per-replica bytes of a model under each memory setting.

Pure Python (no TensorFlow import); `tfdist_opt.cli.memory` reads a Keras
model into `Variable`s and prints `plan(...)`.

Per replica, for a model of P parameter bytes, optimizer state S (slots of
the variables' shapes: Adam 2, SGD with momentum 1, ...) and n replicas:

| setting | parameters | gradients | optimizer state | transient |
|---|---|---|---|---|
| `plain` | P | 2 P (the local gradients and their all-reduced sums) | S | 0 |
| `zero1` (`shard_optimizer_state=True`) | P | P | S / n | one bucket |
| `zero2` (sharded gradients; not available yet) | P | P / n | S / n | one bucket |
| `zero3` (sharded parameters; not available yet) | P / n | P / n | S / n | the largest layer's weights |

The gradient row of `plain` counts the summed copy the all-reduce writes
while the local gradients are still alive (the streamed all-reduce sums
piece by piece, but each variable's summed gradient is whole before the
optimizer applies it). `zero1`'s transient is one bucket of the sharded
step: its gradient shards, updated shards and gathered weights
(`transient_bytes`). `zero2`/`zero3` are what those settings would need
(the ZeRO paper's accounting, Rajbhandari et al., arXiv:1910.02054);
they are listed so a user sees what the next rungs would buy, and marked
not available.

Activations are estimated as every layer's output for the per-replica
batch (`activation_bytes_per_example` x batch): what backprop keeps when
no layer recomputes. It ignores the inputs a layer keeps besides its
output and the temporaries of one op, so treat it as the order of
magnitude.

Example:
    >>> v = [Variable(1000, 4)]
    >>> rows = plan(v, slots=2, replicas=[2], device_bytes=1 << 20)
    >>> [(r.setting, r.total) for r in rows]
    [('plain', 20000), ('zero1', 20000), ('zero2', 18000), ('zero3', 12000)]
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from tfdist_opt.gradients.stages import builtin_stages
from tfdist_opt.gradients.collectives import packing
from tfdist_opt.gradients.zero import zero_plan

# Slots of the variable's shape per optimizer (Keras 3 class names,
# lower-cased), for the default arguments; `slots_for` refines by argument.
OPTIMIZER_SLOTS = {
    "adam": 2,
    "adamw": 2,
    "adamax": 2,
    "nadam": 2,
    "lamb": 2,
    "adadelta": 2,
    "ftrl": 2,
    "lion": 1,
    "adagrad": 1,
    "rmsprop": 1,
    "sgd": 0,
}

SETTINGS = ("plain", "zero1", "zero2", "zero3")
AVAILABLE = {"plain": True, "zero1": True, "zero2": False, "zero3": False}
DEFAULT_BUCKET_BYTES = builtin_stages.ZERO_BUCKET_BYTES


@dataclasses.dataclass(frozen=True)
class Variable:
    """One trainable variable: its element count and bytes per element."""

    num_elements: int
    itemsize: int = 4

    @property
    def nbytes(self) -> int:
        return self.num_elements * self.itemsize


@dataclasses.dataclass(frozen=True)
class Row:
    """Bytes one replica holds under one setting and replica count."""

    setting: str
    replicas: int
    parameters: int
    gradients: int
    optimizer_state: int
    transient: int
    activations: int
    available: bool

    @property
    def total(self) -> int:
        return (
            self.parameters
            + self.gradients
            + self.optimizer_state
            + self.transient
            + self.activations
        )


def slots_for(
    optimizer: str, momentum: float = 0.0, centered: bool = False, amsgrad: bool = False
) -> int:
    """Slots of the variable's shape that `optimizer` keeps per variable.

    Args:
        optimizer: a Keras 3 optimizer class name (any case).
        momentum: SGD's / RMSprop's momentum (a slot when > 0).
        centered: RMSprop's `centered` (one more slot).
        amsgrad: Adam's / AdamW's `amsgrad` (one more slot).

    Raises:
        ValueError: an optimizer this table does not know.
    """
    name = optimizer.lower()
    if name not in OPTIMIZER_SLOTS:
        raise ValueError(
            f"Invalid value for `optimizer`: expected one of "
            f"{sorted(OPTIMIZER_SLOTS)}. Received: {optimizer!r}"
        )
    n = OPTIMIZER_SLOTS[name]
    if name in ("sgd", "rmsprop") and momentum > 0:
        n += 1
    if name == "rmsprop" and centered:
        n += 1
    if name in ("adam", "adamw") and amsgrad:
        n += 1
    return n


def _shard_bytes(variables: Sequence[Variable], n: int) -> int:
    return sum(zero_plan.shard_size(v.num_elements, n) * v.itemsize for v in variables)


def transient_bytes(variables: Sequence[Variable], n: int, bucket_bytes: int) -> int:
    """`zero1`'s transient: one bucket of the sharded step, the largest one.

    A bucket of b gradient bytes (at most `bucket_bytes`, or one variable
    larger than that) holds while it runs its summed shard (b / n), the
    updated shard (b / n) and the gathered weights it writes (at most
    `bucket_bytes`).
    """
    if n <= 1 or not variables:
        return 0
    sizes = [v.nbytes for v in variables]
    buckets = packing.scatter_buckets(["x"] * len(sizes), sizes, bucket_bytes)
    worst = max(sum(sizes[i] for i in b) for b in buckets)
    gathered = min(worst, bucket_bytes) if bucket_bytes > 0 else worst
    return 2 * -(-worst // n) + gathered


def plan(
    variables: Sequence[Variable],
    slots: int,
    replicas: Sequence[int],
    device_bytes: int,
    activation_bytes: int = 0,
    bucket_bytes: int = DEFAULT_BUCKET_BYTES,
) -> list[Row]:
    """One `Row` per setting and replica count (settings in `SETTINGS` order).

    Args:
        variables: the trainable variables.
        slots: optimizer slots per variable (`slots_for`).
        replicas: replica counts to plan for (each >= 1).
        device_bytes: one replica's memory (only checked here; `smallest_fit`
            compares).
        activation_bytes: the activation estimate for one replica's batch.
        bucket_bytes: `shard_bucket_bytes`.

    Raises:
        ValueError: a replica count < 1, negative bytes or slots.
    """
    for name, value in (
        ("slots", slots),
        ("device_bytes", device_bytes),
        ("activation_bytes", activation_bytes),
    ):
        if value < 0:
            raise ValueError(f"Invalid value for `{name}`: expected >= 0. Received: {value}")
    if not replicas or any(int(n) < 1 for n in replicas):
        raise ValueError(
            f"Invalid value for `replicas`: expected replica counts >= 1. Received: {list(replicas)}"
        )
    p = sum(v.nbytes for v in variables)
    rows = []
    for n in replicas:
        shard = _shard_bytes(variables, n)
        state, state_sharded = slots * p, slots * shard
        big = max((v.nbytes for v in variables), default=0)
        cells = {
            "plain": (p, 2 * p if n > 1 else p, state, 0),
            "zero1": (p, p, state_sharded, transient_bytes(variables, n, bucket_bytes)),
            "zero2": (p, shard, state_sharded, transient_bytes(variables, n, bucket_bytes)),
            "zero3": (shard, shard, state_sharded, big if n > 1 else 0),
        }
        for setting in SETTINGS:
            params, grads, opt, trans = cells[setting]
            rows.append(
                Row(
                    setting, int(n), params, grads, opt, trans, activation_bytes, AVAILABLE[setting]
                )
            )
    return rows


def smallest_fit(rows: Sequence[Row], device_bytes: int, available_only: bool = True) -> Row | None:
    """The first row (fewest replicas, then `SETTINGS` order) within `device_bytes`."""
    fits = [r for r in rows if r.total <= device_bytes and (r.available or not available_only)]
    fits.sort(key=lambda r: (r.replicas, SETTINGS.index(r.setting)))
    return fits[0] if fits else None


def parse_bytes(text: str) -> int:
    """`"16GiB"`, `"512MiB"`, `"1.5GB"`, `"1000"` -> bytes.

    Raises:
        ValueError: text that is not a number with an optional unit.
    """
    units = {
        "": 1,
        "b": 1,
        "kb": 10**3,
        "mb": 10**6,
        "gb": 10**9,
        "tb": 10**12,
        "kib": 1 << 10,
        "mib": 1 << 20,
        "gib": 1 << 30,
        "tib": 1 << 40,
    }
    s = str(text).strip().lower().replace(" ", "")
    num = s.rstrip("kmgtib")
    unit = s[len(num) :]
    try:
        value = float(num)
    except ValueError:
        value = -1.0
    if unit not in units or value < 0:
        raise ValueError(
            "Invalid value for `device_memory`: expected a byte count with an "
            f"optional unit (e.g. 16GiB, 512MiB, 1.5GB). Received: {text!r}"
        )
    return int(value * units[unit])


def format_table(rows: Sequence[Row], device_bytes: int) -> str:
    """The planner's table, MiB per replica, and its verdict line."""

    def mib(b):
        return f"{b / (1 << 20):,.1f}"

    head = (
        "setting",
        "replicas",
        "params",
        "grads",
        "opt state",
        "transient",
        "activations",
        "total",
        "fits",
    )
    lines = [" | ".join(head)]
    for r in rows:
        fits = "yes" if r.total <= device_bytes else "no"
        if not r.available:
            fits += " (not available yet)"
        lines.append(
            " | ".join(
                (
                    r.setting,
                    str(r.replicas),
                    mib(r.parameters),
                    mib(r.gradients),
                    mib(r.optimizer_state),
                    mib(r.transient),
                    mib(r.activations),
                    mib(r.total),
                    fits,
                )
            )
        )
    best = smallest_fit(rows, device_bytes)
    lines.append("")
    if best is None:
        later = smallest_fit(rows, device_bytes, available_only=False)
        lines.append(
            f"Nothing available fits {mib(device_bytes)} MiB per replica"
            + (
                f"; {later.setting} on {later.replicas} replicas would (not available yet)."
                if later
                else "; none of the settings would."
            )
        )
    else:
        lines.append(
            f"Smallest setting that fits {mib(device_bytes)} MiB: {best.setting} on "
            f"{best.replicas} replica(s), {mib(best.total)} MiB each."
        )
    return "\n".join(lines)
