"""Callback ordering rules (pure Python, no TF).

Keras calls callbacks in list order and hands every callback the same `logs`
dict, so a callback that *writes* values into `logs` must come before the
callbacks that *read* them (TensorBoard, CSVLogger, EarlyStopping, ...), and
two callbacks that set the same thing must not both be present. Keras itself
appends `History` and `ProgbarLogger` at the end, so those always see our
values.

`ordered(callbacks)` returns a list that satisfies the rules (our callbacks
first, in a canonical order, then the user's callbacks in their order);
`check_order(callbacks)` raises a `ValueError` that says what to move. Every
tfdist_opt callback runs `check_order` on the list it is fitted with at
`on_train_begin`, so a bad order fails before the first step.

Rules are matched on class names along each callback's MRO, so subclasses
follow the rules of their base and this module never imports Keras.
"""

from __future__ import annotations

from typing import Any, Sequence

# Canonical order of our callbacks: restore state first (weights, optimizer
# state and step counter everything else reads), then set the learning rate,
# then the measuring callbacks.
RANKS = {
    "DistributedBackupAndRestore": 0,
    "ScaledLearningRate": 1,
    "CommunicationProfiler": 2,
    "ThroughputMonitor": 3,
}

# Our callbacks that write keys into `logs`, and the keys they write.
LOG_WRITERS = {
    "ScaledLearningRate": ("lr",),
    "CommunicationProfiler": ("comm_fraction", "comm_time", "step_time"),
    "ThroughputMonitor": (
        "examples_per_sec",
        "examples_per_sec_per_replica",
        "step_time_median",
        "step_time_p90",
    ),
}

# Keras callbacks that read `logs` (so must come after the writers).
LOG_READERS = (
    "TensorBoard",
    "CSVLogger",
    "EarlyStopping",
    "ModelCheckpoint",
    "ReduceLROnPlateau",
    "RemoteMonitor",
    "LambdaCallback",
)

# Pairs that must not be used together, with the reason and the fix.
CONFLICTS = {
    (
        "DistributedBackupAndRestore",
        "BackupAndRestore",
    ): "both restore and write backups (Keras's one on every worker, into the "
    "same files); keep only DistributedBackupAndRestore",
    (
        "ScaledLearningRate",
        "LearningRateScheduler",
    ): "both set the optimizer's learning rate every step; pass your schedule "
    "to ScaledLearningRate as `after_warmup` instead",
    (
        "ScaledLearningRate",
        "ReduceLROnPlateau",
    ): "both set the optimizer's learning rate; ScaledLearningRate would undo "
    "every reduction at the next step",
}


def _names(cb: Any) -> list[str]:
    return [c.__name__ for c in type(cb).__mro__]


def _match(cb: Any, table) -> str | None:
    for name in _names(cb):
        if name in table:
            return name
    return None


def check_order(callbacks: Sequence[Any]) -> None:
    """Raises `ValueError` naming what to move if `callbacks` break a rule.

    Args:
        callbacks: sequence of callback objects, in the order `fit` runs them.

    Raises:
        ValueError: a log writer comes after a log reader, or two
            conflicting callbacks are both present.
    """
    callbacks = list(callbacks)
    for (ours, theirs), why in CONFLICTS.items():
        a = [cb for cb in callbacks if ours in _names(cb)]
        b = [cb for cb in callbacks if theirs in _names(cb) and ours not in _names(cb)]
        if a and b:
            raise ValueError(
                f"Invalid callbacks: {type(a[0]).__name__} and "
                f"{type(b[0]).__name__} cannot be used together: {why}."
            )
    for i, cb in enumerate(callbacks):
        writer = _match(cb, LOG_WRITERS)
        if writer is None:
            continue
        for j in range(i):
            reader = _match(callbacks[j], LOG_READERS)
            if reader is not None and _match(callbacks[j], RANKS) is None:
                keys = ", ".join(LOG_WRITERS[writer])
                raise ValueError(
                    f"Invalid callback order: {type(cb).__name__} (position "
                    f"{i}) writes {keys} into `logs`, but "
                    f"{type(callbacks[j]).__name__} (position {j}) reads `logs` "
                    f"before it and would miss them. Move "
                    f"{type(cb).__name__} before {type(callbacks[j]).__name__}, "
                    "or build the list with "
                    "tfdist_opt.callbacks.ordered([...])."
                )


def ordered(callbacks: Sequence[Any]) -> list[Any]:
    """`callbacks` in an order that satisfies every rule.

    tfdist_opt callbacks come first in their canonical order
    (DistributedBackupAndRestore, ScaledLearningRate, CommunicationProfiler,
    ThroughputMonitor); all others follow in the order given.

    Raises:
        ValueError: two conflicting callbacks are both present.

    Example:
        >>> cbs = ordered([keras.callbacks.TensorBoard("tb"),  # doctest: +SKIP
        ...                ThroughputMonitor(global_batch_size=64)])
    """
    callbacks = list(callbacks)
    ours = [
        (RANKS[_match(cb, RANKS)], i, cb)
        for i, cb in enumerate(callbacks)
        if _match(cb, RANKS) is not None
    ]
    rest = [cb for cb in callbacks if _match(cb, RANKS) is None]
    result = [cb for _, _, cb in sorted(ours, key=lambda t: t[:2])] + rest
    check_order(result)
    return result
