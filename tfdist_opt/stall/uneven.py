"""Uneven inputs: workers whose epochs have different lengths end them together.

Under a multi-worker strategy TF's distributed iterator agrees across
workers, at every batch, on which of them still have data (a collective):
a worker whose input ran out gets an empty batch while any other still
has one, and the epoch ends, on every worker at the same step, when the
last input runs out (seen on TF 2.21, 2 workers holding 10 and 7
batches: 10 steps on both, equal and finite weights). Those last steps
average only the examples that are left (the empty batch adds no
gradient), as TF's partial batches do.

Keras breaks that when it knows the epoch's length: it then runs exactly
`num_batches` steps (the input's own length: `tf.data` cardinality,
`len(PyDataset)`), so worker 1 leaves the epoch after its 7 batches while
worker 0 waits in step 8's agreement for it. Seen: a mismatched
collective on both workers (`InternalError: ... Collective instance 132
expected type 0 and data_type 9 but got type 0 and data_type 1`), the
next collective being a different one.

The fix (`keras_binding` at `on_train_begin`): every worker publishes the
length Keras derived, and when they are not all the same, every worker's
epoch length becomes unknown for this `fit`, Keras's own path for inputs of
unknown length, which ends each epoch by the agreement. The chief logs one
warning naming each worker's batch count (`decide`).

Pure Python.
"""

from __future__ import annotations

from typing import Mapping


def decide(counts: Mapping[int, int | None], names: Mapping[int, str]) -> str | None:
    """The warning when the workers' epoch lengths differ, else None.

    Args:
        counts: mapping. Task -> batches per epoch Keras derived from its
            input (None: unknown until the input runs out).
        names: mapping. Task -> label (`worker 1`).

    Returns:
        None when every count is the same (nothing to do), else the warning;
        the caller then lets every worker's epoch end by the agreement.
    """
    if len(set(counts.values())) <= 1:
        return None
    tasks = sorted(counts)
    listed = ", ".join(
        f"{names.get(t, f'worker {t}')}: " + ("unknown" if counts[t] is None else str(counts[t]))
        for t in tasks
    )
    text = (
        f"tfdist_opt: uneven inputs: batches per epoch: {listed}. Each "
        "epoch runs until the last worker's input runs out (TF's "
        "distributed iterator agrees on it at every batch); a worker whose "
        "input ran out takes part with empty batches, so those steps "
        "average the examples left"
    )
    known = {t: c for t, c in counts.items() if c is not None}
    if len(known) == len(counts):
        high = max(known.values())
        short = [
            f"{names.get(t, f'worker {t}')} {high - c}"
            for t, c in sorted(known.items())
            if c < high
        ]
        text += f" (steps without a batch per epoch: {', '.join(short)})"
    return text + (
        ". Keras's fixed epoch length would have made a worker "
        "leave the epoch while the others waited in a collective "
        "for it, so every worker's epoch length is left open for "
        "this fit. Give every worker the same number of batches "
        "(or set steps_per_epoch) for full global batches."
    )
