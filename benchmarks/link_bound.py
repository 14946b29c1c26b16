"""The link bound of `benchmarks/link_speed.py`: pure arithmetic, no TensorFlow.

A data-parallel step on a link of `rate` bytes/s cannot finish faster than
the bytes each worker puts on the wire need at that rate: a ring all-reduce
of `payload` bytes over n workers sends `payload * 2(n-1)/n` bytes per
worker (the nccl-tests bus factor; exactly `payload` at n = 2). Against the
compute of one step measured alone (one process, the same per-worker batch):

- `bound_step_s = max(compute_s, link_s)`: the step if the backward pass hid
  entirely under the collective (perfect overlap);
- `serial_step_s = compute_s + link_s`: the step with no overlap at all.

`link_fraction` = bound step / measured step (1.0: at the bound).
"""

from __future__ import annotations

import re

_RATE = re.compile(r"^(\d+(?:\.\d+)?)(k|m|g)?bit$")
_UNIT = {None: 1.0, "k": 1e3, "m": 1e6, "g": 1e9}  # tc's units: powers of 1000


def rate_bytes_per_s(link: str) -> float:
    """Bytes/s of a `tc` rate such as "1gbit", "10gbit", "500mbit".

    Raises:
        ValueError: naming the value, for anything else.
    """
    m = _RATE.match(str(link).strip().lower())
    if not m or float(m.group(1)) <= 0:
        raise ValueError(
            f"Invalid value for `link`: expected a tc rate such as "
            f"1gbit, 10gbit or 500mbit. Received: link={link!r}"
        )
    return float(m.group(1)) * _UNIT[m.group(2)] / 8


def bus_factor(n: int) -> float:
    """2(n-1)/n: bytes each worker sends per byte of a ring all-reduce."""
    return 2 * (n - 1) / n if n > 1 else 0.0


def payload_kind(setting: str, flags) -> str:
    """What a setting's gradients travel as (for `payload_bytes`): the value
    of its `--compression=` flag, else the setting's name (peers, defaults)."""
    for flag in flags:
        if flag.startswith("--compression="):
            return flag.split("=", 1)[1]
    return setting


def payload_bytes(setting: str, params: int, sent_bytes: int | None = None) -> int:
    """Gradient bytes one step all-reduces for a setting.

    `defaults`: float32 (4 bytes a parameter); `bf16`: 2 bytes;
    `powersgd`: the factors plus the uncompressed rest (`sent_bytes`, which the
    run reports), float32 when it did not report it; the peers: float32.
    """
    if setting == "bf16":
        return 2 * params
    if setting == "powersgd" and sent_bytes:
        return int(sent_bytes)
    return 4 * params


def bound(
    *,
    wire_bytes: float,
    rate: float,
    compute_s: float | None,
    global_batch: int,
    measured_eps: float,
) -> dict:
    """The link bound of one measured setting (see the module docstring)."""
    link_s = wire_bytes / rate
    out = {
        "wire_bytes_per_step": int(wire_bytes),
        "link_s": link_s,
        "link_bound_eps": global_batch / link_s if link_s else None,
    }
    if compute_s is not None:
        bound_s = max(compute_s, link_s)
        serial_s = compute_s + link_s
        out.update(
            compute_s=compute_s,
            bound_step_s=bound_s,
            serial_step_s=serial_s,
            bound_eps=global_batch / bound_s,
            serial_bound_eps=global_batch / serial_s,
            link_fraction=measured_eps * bound_s / global_batch,
            serial_fraction=measured_eps * serial_s / global_batch,
        )
    return out


def busbw_fraction(
    rows: list[dict], rate: float, min_bytes: int = 4 << 20, setting: str | None = None
) -> float | None:
    """Smallest busbw / link rate over the sweep rows of >= `min_bytes`."""
    picked = [
        r["busbw_gbps"] * 1e9 / rate
        for r in rows
        if r.get("bytes", 0) >= min_bytes and (setting is None or r.get("setting") == setting)
    ]
    return min(picked) if picked else None
