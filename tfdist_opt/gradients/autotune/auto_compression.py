"""Which gradient compression pays on this link: none, bf16 or PowerSGD.

`choose_compression` is the decision, pure arithmetic: it predicts the step
time of each candidate from the link's measured all-reduce rate, the bytes
of one step's gradients and the compute of one step, and keeps the fastest
only when it is faster by at least `min_gain` than every less lossy one
(order: none, bf16, powersgd). The model is the no-overlap step (what a
step whose collectives start after backprop costs):

    step(c) = compute_s + codec_s(c) + wire_bytes(c) / link_bytes_per_s

where `wire_bytes` is the all-reduced payload (the link rate is measured as
bus bandwidth, payload x 2(n-1)/n per second, so n cancels), bf16 halves the
payload and costs a cast (`cast_bytes_per_s`), and PowerSGD sends its factors
(`powersgd_bytes`, from `tfdist_opt.gradients.powersgd.powersgd.plan`) and costs
`powersgd_overhead` x compute (error feedback, two small all-reduces, QR).
Without `powersgd_bytes` PowerSGD is not a candidate.

bf16 and PowerSGD are lossy (bf16 keeps 8 bits of mantissa; PowerSGD sends
a rank-R approximation with error feedback): `start_line` says so whenever
one is picked.

The measurement binding (`measure_link`, `choose_for`) needs TensorFlow
and a strategy; it is imported lazily so the decision stays pure. The fit
binding (`compression="auto"`, `tfdist_opt.gradients.autotune.auto_fit`) times the
first steps and applies the choice.
"""

from __future__ import annotations

import dataclasses

CHOICES = ("none", "bf16", "powersgd")  # least to most lossy
LOSSY = {
    "bf16": "gradients cast to bfloat16 on the wire (8-bit mantissa)",
    "powersgd": "rank-{rank} PowerSGD factors with error feedback instead of the gradient matrices",
}


@dataclasses.dataclass(frozen=True)
class Estimate:
    """One candidate's predicted step."""

    choice: str
    wire_bytes: float
    step_s: float


def _check_positive(name: str, value, allow_zero: bool = False) -> None:
    ok = (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and (value >= 0 if allow_zero else value > 0)
    )
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(
            f"Invalid value for `{name}`: expected a number {bound}. Received: {name}={value!r}"
        )


def estimates(
    link_bytes_per_s: float,
    grad_bytes: float,
    compute_s: float,
    *,
    powersgd_bytes: float | None = None,
    cast_bytes_per_s: float = 2e9,
    powersgd_overhead: float = 0.15,
) -> list[Estimate]:
    """The predicted step of each candidate (see the module docstring)."""
    _check_positive("link_bytes_per_s", link_bytes_per_s)
    _check_positive("grad_bytes", grad_bytes, allow_zero=True)
    _check_positive("compute_s", compute_s, allow_zero=True)
    _check_positive("cast_bytes_per_s", cast_bytes_per_s)
    _check_positive("powersgd_overhead", powersgd_overhead, allow_zero=True)
    out = [
        Estimate("none", grad_bytes, compute_s + grad_bytes / link_bytes_per_s),
        Estimate(
            "bf16",
            grad_bytes / 2,
            compute_s + grad_bytes / cast_bytes_per_s + grad_bytes / 2 / link_bytes_per_s,
        ),
    ]
    if powersgd_bytes is not None:
        _check_positive("powersgd_bytes", powersgd_bytes, allow_zero=True)
        out.append(
            Estimate(
                "powersgd",
                powersgd_bytes,
                compute_s * (1 + powersgd_overhead) + powersgd_bytes / link_bytes_per_s,
            )
        )
    return out


def choose_compression(
    link_bytes_per_s: float,
    grad_bytes: float,
    compute_s: float,
    *,
    powersgd_bytes: float | None = None,
    min_gain: float = 0.1,
    allow_lossy: bool = True,
    **model,
) -> tuple[str, str]:
    """Picks none / bf16 / powersgd by the expected step time.

    Args:
        link_bytes_per_s: float. Measured all-reduce bus bandwidth (bytes/s).
        grad_bytes: float. Bytes of one step's float32 gradients.
        compute_s: float. One step without communication (seconds).
        powersgd_bytes: float or None. Bytes PowerSGD would all-reduce per
            step (factors plus the uncompressed rest); None: not a candidate.
        min_gain: float. A lossier candidate must be at least this fraction
            faster than the best less lossy one. Defaults to `0.1`.
        allow_lossy: bool. False: always "none". Defaults to `True`.
        **model: `cast_bytes_per_s`, `powersgd_overhead` (see `estimates`).

    Returns:
        (choice, reason): choice in `CHOICES`; reason, one sentence with the
        predicted step of each candidate.

    Example:
        >>> choose_compression(125e6, 23e6, 0.06)[0]  # 1 Gbit/s, 23 MB
        'bf16'
        >>> choose_compression(5e9, 23e6, 0.06)[0]  # a loopback-like rate
        'none'
    """
    _check_positive("min_gain", min_gain, allow_zero=True)
    ests = estimates(
        link_bytes_per_s, grad_bytes, compute_s, powersgd_bytes=powersgd_bytes, **model
    )
    best = ests[0]
    if allow_lossy:
        for est in ests[1:]:
            if est.step_s <= best.step_s * (1 - min_gain):
                best = est
    figures = ", ".join(f"{e.choice} {1e3 * e.step_s:.0f} ms" for e in ests)
    reason = (
        f"link {link_bytes_per_s / 1e6:.0f} MB/s, {grad_bytes / 1e6:.1f} MB "
        f"of gradients, compute {1e3 * compute_s:.0f} ms a step: "
        f"predicted step {figures}"
    )
    if best.choice == "none":
        reason += (
            f"; no compression is {min_gain:.0%} faster"
            if allow_lossy
            else "; lossy compression not allowed"
        )
    else:
        reason += f"; {best.choice} is the fastest by >= {min_gain:.0%}"
    return best.choice, reason


def start_line(choice: str, reason: str, rank: int = 4) -> str:
    """The line printed at start: the choice, LOSSY when it is, and why."""
    lossy = LOSSY.get(choice)
    tag = f" (LOSSY: {lossy.format(rank=rank)})" if lossy else " (exact)"
    return f"tfdist_opt: compression=auto picked {choice}{tag}: {reason}"


# ------------------------------------------------------ measurement binding
def measure_link(strategy, nbytes: int = 8 << 20, iters: int = 3, warmup: int = 1) -> float:
    """All-reduce bus bandwidth (bytes/s) of `strategy`, the same on every worker.

    Times `iters` all-reduces of one float32 tensor of `nbytes` (after
    `warmup`) with `tfdist_opt.gradients.autotune.timing.time_and_agree`, so every
    worker gets the same figure. A collective: every worker calls it.
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    from tfdist_opt.gradients.autotune import timing  # pylint: disable=g-import-not-at-top

    n = strategy.num_replicas_in_sync
    if n < 2:
        return float("inf")
    t = tf.zeros([nbytes // 4], tf.float32)

    def replica_fn():
        out = tf.distribute.get_replica_context().all_reduce("SUM", t)
        return out[0]

    timed = timing.time_and_agree(strategy, replica_fn, iters, warmup)
    return nbytes * 2 * (n - 1) / n / timed.median_s


def grad_bytes_of(model) -> int:
    """Bytes of one step's float32 gradients of `model`'s trainable weights."""
    return grad_bytes_of_variables(model.trainable_weights)


def grad_bytes_of_variables(variables) -> int:
    """Bytes of the float32 gradients of `variables`."""
    total = 0
    for v in variables:
        size = 1
        for d in v.shape:
            size *= int(d)
        total += 4 * size
    return total


def choose_for(
    strategy, grad_bytes: float, step_s: float, *, powersgd_bytes: float | None = None, **kwargs
) -> tuple[str, str]:
    """Measures the link and decides for a step measured at `step_s`.

    `step_s` is a measured uncompressed step (communication included): the
    compute is what remains after the gradients' time at the measured rate.
    """
    rate = measure_link(strategy)
    if rate == float("inf"):
        return "none", "one replica: no gradient crosses a link"
    compute_s = max(0.0, step_s - grad_bytes / rate)
    return choose_compression(rate, grad_bytes, compute_s, powersgd_bytes=powersgd_bytes, **kwargs)
