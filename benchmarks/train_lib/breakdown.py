"""`--breakdown_steps`: where a training step's time goes, from a TF trace.

After the timed batches, a few more steps run under the TF profiler
(`tf.profiler.experimental`; the profiler's own cost never enters the
throughput figures) and every op event of each step is put in one
category (each a union of intervals clipped to the step, in ms):

- `input`: `IteratorGetNext*` ops and their runs (the step waiting for
  its batch);
- `backward`: ops under `gradient_tape/`;
- `collectives`: one entry per collective op of the step (its name, the
  time from its start to its completion on the collective executor,
  which includes waiting for the slowest peer, and its start within the
  step), plus their union `collective_wait`;
- `gradient_arithmetic`: ops under the optimizer's scope that transform
  gradients before the update: PowerSGD's step (its `powersgd` name scope:
  error feedback, QR, residual update) and the packs' concatenation and
  split;
- `optimizer_apply`: every other non-collective op under the optimizer's
  scope: the update itself (`ResourceApplyKerasMomentum`, or Keras's
  unfused `Mul`/`Sub`/`AssignAdd` in one process) and its counter;
- `xla`: XLA-compiled calls (`CpuExecutable` runs): PowerSGD's factor
  products (and, with `--jit_compile`, the compiled step);
- `forward_loss_metrics`: every other op (the forward pass, the loss, the
  metric updates and the logs' reduction outside the collective);
- `unaccounted`: the step's wall time covered by no op event above
  (executor and Python dispatch, thread hand-offs).

A step is one `EagerLocalExecute: __inference_multi_step_on_iterator*`
event (Keras 3 `fit`'s train function). The figures are medians over the
traced steps (the first is dropped: a fresh `fit` builds its iterator).
Op events may overlap (intra-op threads, the collective executor), so the
categories may sum to more than `step_ms`.
"""

from __future__ import annotations

import statistics

from benchmarks.train_lib import overlap

CATEGORIES = (
    "input",
    "forward_loss_metrics",
    "backward",
    "gradient_arithmetic",
    "xla",
    "collective_wait",
    "optimizer_apply",
    "unaccounted",
)
_XLA_RUN = "CpuExecutable::ExecuteAsyncOnStream"
_GET_NEXT_RUN = "IteratorGetNextOp::DoCompute"
_COLLECTIVE_PREFIX = "Collective"
POWERSGD_SCOPE = "powersgd"  # tfdist_opt.gradients.powersgd.lowrank's name scope
_PACKING_OPS = ("ConcatV2", "SplitV", "Split", "Pack", "Unpack")
_CALL_PREFIX = "StatefulPartitionedCall/"


def op_type(name: str) -> str | None:
    """`"MatMul"` for `"scope/x/MatMul:MatMul"`; None for non-op events."""
    if "::" in name or " " in name:
        return None
    head, sep, kind = name.rpartition(":")
    if not sep or not head or not kind.lstrip("_")[:1].isupper():
        return None
    return kind


def categorize(name: str, optimizer_scope: str) -> str | None:
    """The category of one op event (None: not an op event)."""
    if name == _XLA_RUN:
        return "xla"
    if name == _GET_NEXT_RUN:
        return "input"
    kind = op_type(name)
    if kind is None:
        return None
    path = name.rpartition(":")[0]
    while path.startswith(_CALL_PREFIX):
        path = path[len(_CALL_PREFIX) :]
    if kind.startswith("IteratorGetNext") or kind == "MultiDeviceIteratorGetNextFromShard":
        return "input"
    if kind.startswith(_COLLECTIVE_PREFIX):
        return "collective"
    if "gradient_tape/" in path:
        return "backward"
    scope = optimizer_scope.lower()
    parts = path.lower().split("/")
    if scope in parts:
        inner = parts[parts.index(scope) + 1 :]
        if POWERSGD_SCOPE in inner or kind in _PACKING_OPS:
            return "gradient_arithmetic"
        return "optimizer_apply"
    return "forward_loss_metrics"


def breakdown_from_events(events, optimizer_scope: str = "sgd") -> dict | None:
    """The figures from `(name, start_ps, end_ps)` events; None if no step."""
    steps = sorted((s, e) for n, s, e in events if overlap.STEP_MARK in n)
    if len(steps) > 1:
        steps = steps[1:]  # the first step of a fresh fit builds its iterator
    per_step, collectives = [], {}
    events = sorted(events, key=lambda ev: ev[1])
    for lo, hi in steps:
        inside = [(n, s, e) for n, s, e in events if lo <= s and e <= hi]
        groups = {c: [] for c in CATEGORIES}
        every = []
        for n, s, e in inside:
            cat = categorize(n, optimizer_scope)
            if cat is None:
                continue
            every.append((s, e))
            if cat == "collective":
                groups["collective_wait"].append((s, e))
                key = n.rpartition(":")[0].removeprefix(_CALL_PREFIX)
                collectives.setdefault(key, []).append(((e - s) / 1e9, (s - lo) / 1e9))
            else:
                groups[cat].append((s, e))
        row = {
            c: overlap._union_length(v, lo, hi) / 1e9  # pylint: disable=protected-access
            for c, v in groups.items()
            if c != "unaccounted"
        }
        row["unaccounted"] = (hi - lo - overlap._union_length(every, lo, hi)) / 1e9  # pylint: disable=protected-access
        row["step"] = (hi - lo) / 1e9
        per_step.append(row)
    if not per_step:
        return None
    med = {k: round(statistics.median(r[k] for r in per_step), 3) for k in per_step[0]}
    colls = sorted(
        (
            {
                "name": name,
                "count_per_step": round(len(v) / len(per_step), 2),
                "median_ms": round(statistics.median(d for d, _ in v), 3),
                "median_start_ms": round(statistics.median(s for _, s in v), 3),
            }
            for name, v in collectives.items()
        ),
        key=lambda c: c["median_start_ms"],
    )
    return {
        "traced_steps": len(per_step),
        "step_ms": med.pop("step"),
        "median_ms": med,
        "collectives": colls,
        "steps_ms": [round(r["step"], 3) for r in per_step],
    }


def events_with_names(space):
    """(name, start_ps, end_ps) of every event, as `overlap` reads them."""
    return overlap._events(space)  # pylint: disable=protected-access


def format_breakdown(b: dict) -> str:
    """One line per category, then one per collective."""
    lines = [f"step {b['step_ms']:.2f} ms (median of {b['traced_steps']} traced steps)"]
    lines += [f"  {k:<22} {v:8.2f} ms" for k, v in b["median_ms"].items()]
    lines += [
        f"  collective {c['name']}: {c['median_ms']:.2f} ms, starts at "
        f"{c['median_start_ms']:.2f} ms"
        for c in b["collectives"]
    ]
    return "\n".join(lines)
