"""Which checkpoints in a directory are new and complete. Pure Python, no TF.

The side-car evaluator must never read a half-written checkpoint. Each
format the chief can write signals completeness differently:

* `backup` (`tfdist_opt.DistributedBackupAndRestore`): a save is written
  into `.staging-<step>/`, sealed with `manifest.json` and renamed to
  `backup-<step>/` (an atomic rename), so a `backup-<step>/` directory with
  a manifest is complete. Its step is in the name.
* `tf` (`tf.train.Checkpoint.write/save`, `CheckpointManager`): TensorFlow
  writes `<prefix>.index` last (to a temporary name, then a rename), after
  every `<prefix>.data-*` shard, so a prefix with its index is complete.
  Temporary names (`*tempstate*`, `*_temp*`) are ignored. Step: the
  `-<N>` suffix of the prefix (`ckpt-3`).
* `keras` (`.weights.h5`, `.keras`, `.h5`: `ModelCheckpoint`,
  `save_weights`, Keras's `BackupAndRestore`): Keras writes these in place,
  with no completion marker (`BackupAndRestore` overwrites
  `latest.weights.h5` each epoch). A version (size, mtime) counts as
  complete once it has stayed unchanged for `settle_s` seconds; the reader
  then checks the version again after loading (`unchanged`) and drops a
  load that raced a rewrite. Once training has ended (no writer is left)
  every present file is final. Step: `epoch` of Keras's
  `training_metadata.json` for `latest.weights.h5`, else the last integer
  in the name (`weights.03.weights.h5` -> 3), else None.

Names starting with `.` and `.bkp` copies are ignored. A checkpoint is
identified by its path and version, so one rewritten in place is new again.

Example:
    >>> watcher = CheckpointWatcher("/ckpt", settle_s=2.0)  # doctest: +SKIP
    >>> for ckpt in watcher.poll():  # doctest: +SKIP
    ...     load(ckpt); watcher.mark_done(ckpt)
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import stat as stat_lib
import time
from typing import Callable

BACKUP_PREFIX = "backup-"
BACKUP_MANIFEST = "manifest.json"
BACKUP_STATE = "state"  # DistributedBackupAndRestore's tf.train prefix
KERAS_BACKUP_WEIGHTS = "latest.weights.h5"
KERAS_BACKUP_METADATA = "training_metadata.json"
KERAS_SUFFIXES = (".weights.h5", ".keras", ".h5")
FORMATS = ("backup", "tf", "keras")
_TRAILING_INT = re.compile(r"(\d+)(?!.*\d)")
_TEMP_MARKERS = ("tempstate", "_temp")


@dataclasses.dataclass(frozen=True)
class Found:
    """One complete-looking checkpoint.

    Attributes:
        name: str. Its entry in the directory (file, prefix or backup dir).
        path: str. What to load: the file, the tf.train prefix, or the
            backup's `<dir>/state` prefix.
        format: str. One of `FORMATS`.
        step: int or None. Training position it records, when known.
        version: tuple. Changes when the checkpoint is rewritten.
        mtime_ns: int. Modification time, for ordering.
    """

    name: str
    path: str
    format: str
    step: int | None
    version: tuple
    mtime_ns: int

    @property
    def key(self) -> tuple:
        return (self.path, self.version)


def _step_from_name(name: str) -> int | None:
    match = _TRAILING_INT.search(name)
    return int(match.group(1)) if match else None


def _is_keras_file(name: str) -> bool:
    return name.endswith(KERAS_SUFFIXES)


def scan(
    directory: str,
    listdir: Callable = os.listdir,
    stat: Callable = os.stat,
    read_text: Callable | None = None,
) -> list[Found]:
    """Every checkpoint in `directory` whose format says it is complete.

    `keras` files are returned whatever their age: the settle rule is
    `CheckpointWatcher`'s. Files that vanish while scanning are skipped.

    Args:
        directory: str. The checkpoint directory (top level only).
        listdir, stat, read_text: injected file system calls (tests).

    Returns:
        list of `Found`, oldest first (mtime, then step, then name).
    """
    read_text = read_text or _read_text
    try:
        names = set(listdir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return []
    found = []
    for name in sorted(names):
        if name.startswith(".") or any(m in name for m in _TEMP_MARKERS):
            continue
        path = os.path.join(directory, name)
        try:
            item = _classify(directory, name, path, names, listdir, stat, read_text)
        except (FileNotFoundError, NotADirectoryError):
            continue  # removed while we looked (pruned, rewritten)
        if item is not None:
            found.append(item)
    found.sort(key=lambda f: (f.mtime_ns, -1 if f.step is None else f.step, f.name))
    return found


def _classify(directory, name, path, names, listdir, stat, read_text):
    if name.startswith(BACKUP_PREFIX) and name[len(BACKUP_PREFIX) :].isdigit():
        if BACKUP_MANIFEST not in set(listdir(path)):
            return None
        st = stat(os.path.join(path, BACKUP_MANIFEST))
        return Found(
            name,
            os.path.join(path, BACKUP_STATE),
            "backup",
            int(name[len(BACKUP_PREFIX) :]),
            (name, st.st_mtime_ns),
            st.st_mtime_ns,
        )
    if name.endswith(".index"):
        prefix = name[: -len(".index")]
        if not any(n.startswith(prefix + ".data-") for n in names):
            return None
        st = stat(path)
        return Found(
            prefix,
            os.path.join(directory, prefix),
            "tf",
            _step_from_name(prefix),
            (st.st_size, st.st_mtime_ns),
            st.st_mtime_ns,
        )
    if _is_keras_file(name):
        st = stat(path)
        if not stat_lib.S_ISREG(st.st_mode):
            return None
        step = _step_from_name(name.rsplit(".", 2)[0])
        if name == KERAS_BACKUP_WEIGHTS and KERAS_BACKUP_METADATA in names:
            step = _keras_backup_epoch(read_text(os.path.join(directory, KERAS_BACKUP_METADATA)))
        return Found(name, path, "keras", step, (st.st_size, st.st_mtime_ns), st.st_mtime_ns)
    return None


def _keras_backup_epoch(text: str | None) -> int | None:
    try:
        epoch = json.loads(text)["epoch"]
    except (TypeError, ValueError, KeyError):
        return None
    return epoch if isinstance(epoch, int) else None


def _read_text(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None


class CheckpointWatcher:
    """New complete checkpoints of one directory, each returned once.

    Args:
        directory: str. The directory the chief writes checkpoints into.
        settle_s: float. How long a `keras` file must keep one size and
            mtime before it is read. Defaults to `2.0`.
        clock: callable returning seconds (monotonic). Defaults to
            `time.monotonic`.
        listdir, stat, read_text: injected file system calls (tests).

    Raises:
        ValueError: `settle_s` is negative.
    """

    def __init__(
        self,
        directory: str,
        settle_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        listdir: Callable = os.listdir,
        stat: Callable = os.stat,
        read_text: Callable | None = None,
    ):
        if isinstance(settle_s, bool) or not isinstance(settle_s, (int, float)) or settle_s < 0:
            raise ValueError(
                "Invalid value for `settle_s`: expected a number "
                f">= 0 (seconds). Received: settle_s={settle_s!r}"
            )
        self.directory = directory
        self.settle_s = float(settle_s)
        self._clock, self._listdir, self._stat = clock, listdir, stat
        self._read_text = read_text
        self._first_seen: dict[tuple, float] = {}
        self._done: set[tuple] = set()

    def poll(self, final: bool = False) -> list[Found]:
        """Complete checkpoints not yet marked done, oldest first.

        Args:
            final: bool. Training has ended (no writer is left), so every
                present `keras` file is complete without settling.
                Defaults to `False`.
        """
        now = self._clock()
        out = []
        present = set()
        for item in scan(self.directory, self._listdir, self._stat, self._read_text):
            present.add(item.key)
            if item.key in self._done:
                continue
            if item.format == "keras" and not final:
                first = self._first_seen.setdefault(item.key, now)
                if now - first < self.settle_s:
                    continue
            out.append(item)
        # Forget versions that are gone, so the table stays small.
        self._first_seen = {k: t for k, t in self._first_seen.items() if k in present}
        return out

    def unchanged(self, item: Found) -> bool:
        """True if `item` is still on disk in the version that was found."""
        try:
            if item.format == "backup":
                self._stat(os.path.join(os.path.dirname(item.path), BACKUP_MANIFEST))
                return True
            path = item.path + ".index" if item.format == "tf" else item.path
            st = self._stat(path)
        except (FileNotFoundError, NotADirectoryError):
            return False
        return (st.st_size, st.st_mtime_ns) == item.version

    def mark_done(self, item: Found) -> None:
        """`item` was evaluated (or found unreadable): never return it again."""
        self._done.add(item.key)
