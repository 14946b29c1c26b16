"""The manifest: every private TensorFlow / Keras name tfdist_opt relies on.

Keras 3 and TF offer no public hook for some of what tfdist_opt does (the
gradient all-reduce, accumulation under tf.distribute, per-replica batch
cardinality, the coordination service's key-value store). Each use is listed
here with the upstream reason; `tests/test_private_api.py` resolves every
entry, so a TF/Keras upgrade that removes or renames one fails there, by
name, instead of deep inside a training step. It also checks that every
`obj._name` the package reads is either its own or listed here, and that
only `tfdist_opt.seam` imports `keras.src` or `tensorflow.python`.

An entry with `params` is a method whose signature the gradient hooks rely
on (`tfdist_opt.seam.upstream.check()` compares it with the installed
Keras before any step).

The entries are listed by area (`entries_training`, `entries_gradients`,
`entries_tools`); `ENTRIES` below is the one place that joins them.

Pure Python: `ENTRIES` is data; `missing()` imports what it checks.
"""

from __future__ import annotations

import importlib
from typing import Any

from tfdist_opt.seam import entries_gradients
from tfdist_opt.seam import entries_tools
from tfdist_opt.seam import entries_training
from tfdist_opt.seam.entries_gradients import TF_OPTIMIZER  # noqa: F401
from tfdist_opt.seam.private_name import PrivateName  # noqa: F401


# Every entry resolved on each cell of the version matrix (.ci/version_matrix:
# TensorFlow 2.18-2.21, each with Keras 3.12 and 3.15); no version needs
# another name.
CHECKED_VERSIONS = {"tensorflow": "2.18-2.21", "keras": "3.12-3.15", "tf_keras": "2.18-2.21"}


ENTRIES: tuple[PrivateName, ...] = (
    entries_training.ENTRIES + entries_gradients.ENTRIES + entries_tools.ENTRIES
)


def resolve(entry: PrivateName) -> Any:
    """The object `entry` names; raises AttributeError/ImportError if gone."""
    owner = entry.owner
    instance = owner.endswith("()")
    owner = owner[:-2] if instance else owner
    obj = _import_dotted(owner)
    if instance:
        obj = obj()
    for part in entry.attr.split("."):
        obj = getattr(obj, part)
    return obj


def missing(entries=None) -> list[str]:
    """One line per entry (of `entries`, default `ENTRIES`) that no longer resolves."""
    out = []
    for entry in ENTRIES if entries is None else entries:
        if not entry.resolvable:
            continue
        try:
            resolve(entry)
        except (ImportError, AttributeError) as e:
            out.append(
                f"{entry.owner}.{entry.attr} (used in {entry.used_in}: "
                f"{entry.why}): {type(e).__name__}: {e}"
            )
    return out


def _import_dotted(path: str) -> Any:
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for part in parts[i:]:
            obj = getattr(obj, part)
        return obj
    raise ImportError(f"cannot import {path}")
