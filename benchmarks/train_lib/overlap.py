"""`overlap_fraction`: how much of the gradient all-reduce runs during backprop.

Measured from a TF profiler trace (`tf.profiler.experimental`, the XSpace
protobuf it writes) of a few training steps, after the timed batches (the
profiler's own cost never enters the throughput figures):

- a step is one `EagerLocalExecute: __inference_multi_step_on_iterator*`
  event (Keras 3 `fit`'s train function) on the Python thread;
- backprop is every op event under `gradient_tape/` in that step;
- the all-reduce is every `...:CollectiveReduceV2` op event in that step
  (the kernel's run on the compute thread and its execution on the
  collective executor's threads), as a union of intervals.

`overlap_fraction` = all-reduce time before the last backprop op ends /
all-reduce time, over all traced steps; `early_start_fraction` = share of
steps whose first all-reduce starts before backprop ends. 0 means the
all-reduce waits for the whole backward pass (nothing overlaps).
"""

from __future__ import annotations

import glob
import os
import shutil
import tempfile

STEP_MARK = "__inference_multi_step_on_iterator"
BACKPROP_MARK = "gradient_tape/"
ALLREDUCE_MARK = ":CollectiveReduceV2"


def _events(space):
    """(name, start_ps, end_ps) of every event on every host line."""
    out = []
    for plane in space.planes:
        for line in plane.lines:
            base = line.timestamp_ns * 1000
            for e in line.events:
                name = plane.event_metadata[e.metadata_id].name
                start = base + e.offset_ps
                out.append((name, start, start + e.duration_ps))
    return out


def _union_length(intervals, lo: float, hi: float) -> float:
    """Length of the union of `intervals` clipped to [lo, hi]."""
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted((max(s, lo), min(e, hi)) for s, e in intervals):
        if e <= s:
            continue
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s
    return total


def overlap_from_events(events) -> dict | None:
    """The figures from (name, start, end) events; None without collectives."""
    steps = sorted((s, e) for n, s, e in events if STEP_MARK in n)
    overlapped = total = 0.0
    early, counted = 0, 0
    for lo, hi in steps:
        inside = [(n, s, e) for n, s, e in events if lo <= s and e <= hi]
        back = [e for n, s, e in inside if BACKPROP_MARK in n]
        comm = [(s, e) for n, s, e in inside if n.endswith(ALLREDUCE_MARK)]
        if not back or not comm:
            continue
        back_end = max(back)
        counted += 1
        total += _union_length(comm, lo, hi)
        overlapped += _union_length(comm, lo, back_end)
        early += min(s for s, _ in comm) < back_end
    if not counted or total <= 0:
        return None
    return {
        "overlap_fraction": overlapped / total,
        "early_start_fraction": early / counted,
        "traced_steps": counted,
    }


def read_trace(logdir: str):
    """The XSpace of the newest `*.xplane.pb` under `logdir`."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2  # pylint: disable=g-import-not-at-top

    files = sorted(
        glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True), key=os.path.getmtime
    )
    if not files:
        raise FileNotFoundError(f"No *.xplane.pb under {logdir}")
    space = xplane_pb2.XSpace()
    with open(files[-1], "rb") as f:
        space.ParseFromString(f.read())
    return space


def trace_events(model, dataset, steps: int, trace_dir: str | None, profile: bool):
    """Trains `steps` more steps (every worker); the events where `profile`.

    Returns (name, start_ps, end_ps) of every traced event, or None on a
    worker that does not profile.
    """
    import tensorflow as tf  # pylint: disable=g-import-not-at-top

    logdir = trace_dir or tempfile.mkdtemp(prefix="tfdist_overlap_")
    try:
        if profile:
            tf.profiler.experimental.start(logdir)
        try:
            model.fit(dataset, epochs=1, steps_per_epoch=steps, verbose=0, shuffle=False)
        finally:
            if profile:
                tf.profiler.experimental.stop()
        return _events(read_trace(logdir)) if profile else None
    finally:
        if trace_dir is None:
            shutil.rmtree(logdir, ignore_errors=True)


def measure(model, dataset, steps: int, trace_dir: str | None, profile: bool) -> dict | None:
    """Trains `steps` more steps (every worker), profiled where `profile`."""
    events = trace_events(model, dataset, steps, trace_dir, profile)
    return overlap_from_events(events) if events is not None else None
