"""ZeRO stage 1 (sharded optimizer state): the pure decisions.

Pure Python (no TensorFlow import); the TF binding is
`tfdist_opt.gradients.sharded_state`.

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


def shard_size(num_elements: int, num_replicas: int) -> int:
    """Elements of one replica's shard of a variable (padded; >= 1)."""
    return max(1, math.ceil(num_elements / num_replicas))


def padded_size(num_elements: int, num_replicas: int) -> int:
    """`num_replicas * shard_size(...)`: the flat length the shards cover."""
    return num_replicas * shard_size(num_elements, num_replicas)


def shard_bounds(num_elements: int, num_replicas: int, replica: int
                 ) -> tuple[int, int]:
    """[start, stop) of replica `replica`'s real (unpadded) elements."""
    s = shard_size(num_elements, num_replicas)
    return min(replica * s, num_elements), min((replica + 1) * s, num_elements)


def state_bytes(slot_sizes: list[int], itemsize: int, num_replicas: int,
                sharded: bool, scalar_bytes: int = 0) -> int:
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


def gather_buckets(dtypes: list[str], shard_sizes: list[int]
                   ) -> list[tuple[str, list[tuple[int, int, int]]]]:
    """How the updated shards are packed into as few all-gathers as possible.

    One bucket per dtype (a collective moves one dtype), in order of first
    appearance; inside a bucket the shards are concatenated in variable
    order. After the all-gather of a bucket of total `S` elements, replica
    r's part is `[r * S, (r + 1) * S)`, and variable i's full padded value
    is, for every r, the `[offset, offset + s)` slice of that part.

    Args:
        dtypes: the dtype name of each variable.
        shard_sizes: each variable's shard size (`shard_size(size, n)`).

    Returns:
        A list of `(dtype, [(variable_index, offset, shard_size), ...])`.

    Example:
        >>> gather_buckets(["float32", "float16", "float32"], [3, 2, 4])
        [('float32', [(0, 0, 3), (2, 3, 4)]), ('float16', [(1, 0, 2)])]
    """
    if len(dtypes) != len(shard_sizes):
        raise ValueError(
            "Invalid value for `shard_sizes`: expected one per dtype "
            f"({len(dtypes)}). Received: shard_sizes of length {len(shard_sizes)}")
    buckets: dict[str, list[tuple[int, int, int]]] = {}
    ends: dict[str, int] = {}
    for i, (dtype, s) in enumerate(zip(dtypes, shard_sizes)):
        offset = ends.get(dtype, 0)
        buckets.setdefault(dtype, []).append((i, offset, int(s)))
        ends[dtype] = offset + int(s)
    return list(buckets.items())


def check_optimizer(class_name: str, use_ema: bool,
                    gradient_accumulation_steps) -> None:
    """Raises for optimizers whose state cannot be sharded elementwise."""
    if class_name in REFUSED_OPTIMIZERS:
        raise NotImplementedError(
            f"tfdist_opt shard_optimizer_state does not support {class_name}: "
            f"{REFUSED_OPTIMIZERS[class_name]}. Received: optimizer="
            f"{class_name}. Expected an elementwise optimizer (SGD, Adam, "
            "AdamW, RMSprop, Adagrad, ...), or shard_optimizer_state=False.")
    for name, value in (("use_ema", use_ema),
                        ("gradient_accumulation_steps",
                         gradient_accumulation_steps)):
        if value:
            raise NotImplementedError(
                f"tfdist_opt shard_optimizer_state does not support `{name}` "
                f"on {class_name}. Received: {name}={value!r}. Expected it "
                "unset (use opt_strategy(grad_accum=k) for accumulation), or "
                "shard_optimizer_state=False.")


def check_combination(compression: str, grad_accum: int) -> None:
    """Raises for gradient-path settings sharding does not compose with.

    Args:
        compression: the `compression` field.
        grad_accum: the `grad_accum` field.

    Raises:
        ValueError: `compression="powersgd"` (its error-feedback state and
            the low-rank update are per whole matrix), or `grad_accum > 1`
            (the accumulated update runs in the cross-replica context,
            where the per-replica shard update cannot run).
    """
    if compression == "powersgd":
        raise ValueError(
            "Invalid value for `compression` with shard_optimizer_state=True: "
            "PowerSGD's error feedback and low-rank update need the whole "
            "gradient matrix on every replica, which sharding is meant to "
            "avoid. Received: compression='powersgd'. Expected 'none', "
            "'fp16' or 'bf16', or shard_optimizer_state=False.")
    if grad_accum > 1:
        raise ValueError(
            "Invalid value for `grad_accum` with shard_optimizer_state=True: "
            "not implemented (the accumulated update runs in the "
            "cross-replica context, the sharded update needs the replica "
            f"context). Received: grad_accum={grad_accum}. Expected 1, or "
            "shard_optimizer_state=False.")
