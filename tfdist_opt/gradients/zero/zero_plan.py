"""ZeRO stage 1 (sharded optimizer state): the pure decisions.

Pure Python (no TensorFlow import); the TF binding is
`tfdist_opt.gradients.zero.sharded_state`.

With `shard_optimizer_state=True` and n replicas, every optimizer slot that
has the shape of its model variable (Adam's m and v, SGD's momentum, ...)
is kept as a flat shard of `shard_size(size, n)` elements per replica:
replica r owns elements `[r * s, (r + 1) * s)` of the flattened variable,
zero-padded to `n * s` (ZeRO, Rajbhandari et al., SC'20,
arXiv:1910.02054; PyTorch's `ZeroRedundancyOptimizer` partitions whole
parameters instead, which balances worse on models with a few large
matrices). Scalars (`iteration`, the learning rate) stay whole.

Each step: gradients are all-reduced as without sharding (TF's CPU
collectives have no reduce-scatter: `CollectiveReduceScatterV2` never
returned on virtual CPUs in TF 2.21), each replica slices its shard of the
gradient and of the weights, runs the optimizer's own `update_step` on the
shard with its shard of the slots, and the updated shards are all-gathered
and assigned to every replica's copy: concatenated per dtype
(`gather_buckets`), so one all-gather per dtype, not one per variable (on
TF's CPU RING each collective has a fixed cost that dominated the step).

Example:
    >>> shard_size(10, 4), shard_bounds(10, 4, 3)
    (3, (9, 10))
"""

from __future__ import annotations

import math


# Optimizers whose slots are not elementwise in the variable (factored
# second moments, matrix orthogonalisation): a flat shard changes the math.
REFUSED_OPTIMIZERS = {
    "Adafactor": "its second moments are factored over rows and columns",
    "Muon": "its update orthogonalises whole matrices",
}


def shard_size(num_elements: int, num_replicas: int, unit: int = 1) -> int:
    """Elements of one replica's shard of a variable (padded; >= 1).

    With `unit > 1` (`row_unit`) the shard is a whole number of rows of
    `unit` elements.
    """
    rows = math.ceil(num_elements / unit)
    return max(1, unit * math.ceil(rows / num_replicas))


def padded_size(num_elements: int, num_replicas: int, unit: int = 1) -> int:
    """`num_replicas * shard_size(...)`: the flat length the shards cover."""
    return num_replicas * shard_size(num_elements, num_replicas, unit)


def shard_bounds(
    num_elements: int, num_replicas: int, replica: int, unit: int = 1
) -> tuple[int, int]:
    """[start, stop) of replica `replica`'s real (unpadded) elements."""
    s = shard_size(num_elements, num_replicas, unit)
    return min(replica * s, num_elements), min((replica + 1) * s, num_elements)


def state_bytes(
    slot_sizes: list[int], itemsize: int, num_replicas: int, sharded: bool, scalar_bytes: int = 0
) -> int:
    """Optimizer-state bytes held by one replica.

    Args:
        slot_sizes: elements of each full-size slot (e.g. m and v of every
            variable).
        itemsize: bytes per element.
        num_replicas: n.
        sharded: whether the slots are sharded.
        scalar_bytes: bytes of the whole (unsharded) scalars.

    Returns:
        int bytes.
    """
    if sharded:
        per = sum(shard_size(k, num_replicas) for k in slot_sizes)
    else:
        per = sum(slot_sizes)
    return per * itemsize + scalar_bytes


def row_unit(shape, num_replicas: int, max_waste: float = 0.01) -> int:
    """Elements per leading-axis row if shards can be whole rows, else 1.

    A shard of whole rows is a row range of the variable, so the gathered
    values can be written into it in place (a strided-slice assign) instead
    of building the full value first. Rows are used when padding the row
    count to a multiple of `num_replicas` wastes at most `max_waste` of the
    rows (so the state stays within 1/n + 1%); otherwise (e.g. a 3x3 conv
    kernel's leading axis) the shard is a flat element range.

    Example:
        >>> row_unit((4096, 1024), 2), row_unit((3, 3, 64, 64), 2), row_unit((7,), 2)
        (1024, 1, 1)
    """
    shape = tuple(int(d) for d in shape)
    if len(shape) < 2 or shape[0] == 0:
        return 1
    unit = math.prod(shape[1:])
    waste = math.ceil(shape[0] / num_replicas) * num_replicas - shape[0]
    return unit if unit > 0 and waste <= max_waste * shape[0] else 1


def gather_plan(
    dtypes: list[str],
    itemsizes: list[int],
    shard_sizes: list[int],
    units: list[int],
    splittable: list[bool],
    num_replicas: int,
    max_bytes: int,
) -> list[tuple[str, list[tuple[int, int, int, int]]]]:
    """How the updated shards are gathered: buckets of bounded size.

    Each bucket is one gather collective of one dtype; its gathered output
    (`num_replicas` x the bucket's elements x itemsize) stays within
    `max_bytes` where possible, so at most one bucket's worth of weights is
    in flight. A piece is a row-aligned range `[start, start + length)` of
    one variable's shard (a multiple of its `unit`); a variable that is not
    `splittable` (not written in place) is one piece, whole. A single row
    larger than the bound is a bucket of its own. `max_bytes <= 0`: one
    bucket per dtype.

    Args:
        dtypes: each variable's dtype name.
        itemsizes: bytes per element of each variable.
        shard_sizes: each variable's shard size (`shard_size`).
        units: each variable's `row_unit`.
        splittable: whether each variable may be split across buckets.
        num_replicas: n.
        max_bytes: bound on one bucket's gathered bytes.

    Returns:
        A list of `(dtype, [(variable_index, start, length, offset), ...])`,
        `offset` being the piece's position in the bucket's per-replica part.

    Example:
        >>> gather_plan(["float32"] * 2, [4, 4], [6, 2], [2, 1], [True, True], 2, 32)
        [('float32', [(0, 0, 4, 0)]), ('float32', [(0, 4, 2, 0), (1, 0, 2, 2)])]
    """
    lists = (itemsizes, shard_sizes, units, splittable)
    if any(len(x) != len(dtypes) for x in lists):
        raise ValueError(
            "Invalid value for `shard_sizes`: expected one itemsize, shard "
            f"size, unit and flag per dtype ({len(dtypes)}). Received: "
            f"lengths {[len(x) for x in lists]}"
        )
    order: dict[str, list[int]] = {}
    for i, dtype in enumerate(dtypes):
        order.setdefault(dtype, []).append(i)
    out = []
    for dtype, members in order.items():
        pieces: list[tuple[int, int, int, int]] = []
        used = 0
        for i in members:
            s, unit = int(shard_sizes[i]), int(units[i])
            cap = max_bytes // (num_replicas * int(itemsizes[i])) if max_bytes > 0 else None
            start = 0
            while start < s:
                left = s - start
                if cap is None:
                    take = left
                elif not splittable[i]:
                    take = left if (used == 0 or used + left <= cap) else 0
                else:
                    take = min(left, max(cap - used, 0) // unit * unit)
                    if take == 0 and used == 0:
                        take = min(left, unit)
                if take == 0:
                    out.append((dtype, pieces))
                    pieces, used = [], 0
                    continue
                pieces.append((i, start, take, used))
                used += take
                start += take
        if pieces:
            out.append((dtype, pieces))
    return out


def check_optimizer(class_name: str, use_ema: bool, gradient_accumulation_steps) -> None:
    """Raises for optimizers whose state cannot be sharded elementwise."""
    if class_name in REFUSED_OPTIMIZERS:
        raise NotImplementedError(
            f"tfdist_opt shard_optimizer_state does not support {class_name}: "
            f"{REFUSED_OPTIMIZERS[class_name]}. Received: optimizer="
            f"{class_name}. Expected an elementwise optimizer (SGD, Adam, "
            "AdamW, RMSprop, Adagrad, ...), or shard_optimizer_state=False."
        )
    for name, value in (
        ("use_ema", use_ema),
        ("gradient_accumulation_steps", gradient_accumulation_steps),
    ):
        if value:
            raise NotImplementedError(
                f"tfdist_opt shard_optimizer_state does not support `{name}` "
                f"on {class_name}. Received: {name}={value!r}. Expected it "
                "unset (use opt_strategy(grad_accum=k) for accumulation), or "
                "shard_optimizer_state=False."
            )
