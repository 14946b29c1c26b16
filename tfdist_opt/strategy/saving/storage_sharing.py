"""Which workers share a directory's storage: decided from evidence. Pure.

A path string proves nothing about storage: `ckpt/` on two hosts can be one
NFS export or two local disks, and the same absolute path can be either.
So every worker looks: each creates a small file with a random name (a
*token*) in the directory (or, if the directory does not exist yet, in its
nearest existing ancestor, on whose filesystem it will be created), posts
the token's name in the coordination service's key-value store, and checks
which of the other workers' tokens it can see. Then each worker posts the
list it saw, reads every other worker's list, and removes its token (every
worker has looked by then). Workers that see each other's tokens share the
storage; sharing is an equivalence, so the groups are the connected
components of "saw", and every worker computes the same groups from the
same lists. The first task of a group in cluster order (`chief_0`,
`worker_0`, `worker_1`, ...) is the group's *writer*: the one that writes a
file into that directory for the whole group. A worker alone in its group
(a local disk) is its own writer and keeps a complete copy.

The chief-only rule is the special case "one group" (`shared_layout`), and
"every worker writes its own copy" is "one group per worker"
(`private_layout`).

A token is checked by name (`os.path.exists`, a fresh `LOOKUP` on NFS, which
caches no negative entry for a name it never looked up) rather than by
listing the directory, which NFS clients may serve from a stale cache.

Everything here is plain Python: the key-value store and the file
operations are passed in (`tfdist_opt.strategy.saving.file_writers` binds them to
TensorFlow's coordination service and the local filesystem), so the
protocol is tested without processes or sleeping.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
import uuid
from typing import Callable, Iterable, Mapping

from tfdist_opt.coordination.kv_store import KeyValueStore

MODES = ("auto", "shared", "per_worker")
TOKEN_PREFIX = ".tfdist_opt_probe_"
# How long a worker waits for the others to reach the same save. They run
# the same code, and a save follows a collective step or another save, so
# they arrive within seconds; code that saves on the chief only waits this
# long once per directory (its fix: storage_sharing="shared").
DEFAULT_TIMEOUT_S = 60.0


class Files:
    """The file operations of a probe, on the local filesystem."""

    def create(self, directory: str) -> str | None:
        """Creates a fresh token file in `directory`; its name, or None if
        this worker cannot write there."""
        name = TOKEN_PREFIX + uuid.uuid4().hex
        try:
            fd = os.open(os.path.join(directory, name), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except OSError:
            return None
        os.close(fd)
        return name

    def exists(self, directory: str, name: str) -> bool:
        return os.path.exists(os.path.join(directory, name))

    def remove(self, directory: str, name: str) -> None:
        try:
            os.remove(os.path.join(directory, name))
        except OSError:
            pass


@dataclasses.dataclass(frozen=True)
class Layout:
    """Who shares a directory's storage with whom.

    Attributes:
        groups: tuple of tuples of str. Tasks sharing one storage, each
            group in cluster order; the groups ordered by their first task.
        evidence: str. How the groups were found (for logs).
    """

    groups: tuple[tuple[str, ...], ...]
    evidence: str = "probe"

    def group_of(self, task: str) -> tuple[str, ...]:
        for group in self.groups:
            if task in group:
                return group
        return (task,)

    def writer_of(self, task: str) -> str:
        """The task that writes for `task`'s group (itself when alone)."""
        return self.group_of(task)[0]

    def is_writer(self, task: str) -> bool:
        return self.writer_of(task) == task

    def describe(self) -> str:
        parts = [
            (
                f"{', '.join(g)} share it ({g[0]} writes)"
                if len(g) > 1
                else f"{g[0]} alone (writes its own copy)"
            )
            for g in self.groups
        ]
        return "; ".join(parts) + f" [{self.evidence}]"


def shared_layout(tasks: Iterable[str], evidence: str = "shared") -> Layout:
    """Every task shares the storage: the first one writes (the chief rule)."""
    return Layout((tuple(tasks),), evidence)


def private_layout(tasks: Iterable[str], evidence: str = "per_worker") -> Layout:
    """No task shares: each writes its own copy."""
    return Layout(tuple((t,) for t in tasks), evidence)


def group(tasks: Iterable[str], seen: Mapping[str, Iterable[str] | None]) -> Layout:
    """Groups `tasks` by who saw whose token. Pure.

    Args:
        tasks: iterable of str. Every task, in cluster order.
        seen: mapping. For each task, the tasks whose tokens it saw
            (None or missing: it never reported; it then shares only what
            others saw of it).

    Returns:
        The `Layout`: connected components of the "saw" relation, each in
        cluster order.
    """
    tasks = list(tasks)
    parent = {t: t for t in tasks}

    def root(t):
        while parent[t] != t:
            parent[t] = parent[parent[t]]
            t = parent[t]
        return t

    for t in tasks:
        for other in seen.get(t) or ():
            if other in parent and other != t:
                a, b = root(t), root(other)
                if a != b:
                    # The earlier task stays the root: cluster order wins.
                    if tasks.index(a) > tasks.index(b):
                        a, b = b, a
                    parent[b] = a
    groups: dict[str, list[str]] = {}
    for t in tasks:
        groups.setdefault(root(t), []).append(t)
    return Layout(tuple(tuple(g) for g in groups.values()))


def probe_directory(directory: str, isdir: Callable[[str], bool] = os.path.isdir) -> str:
    """`directory`, or its nearest existing ancestor (where it will be created)."""
    path = os.path.abspath(directory)
    while not isdir(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def probe(
    directory: str,
    me: str,
    tasks: Iterable[str],
    store: KeyValueStore,
    namespace: str,
    files: Files | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[Layout, list[str]]:
    """Runs the probe for `directory` with every other task; see the module docstring.

    Every task calls it for the same `namespace` (the n-th directory decision
    of the job, the same on every worker). A task that does not post within
    `timeout_s` (all waits together, plus up to 5 s per later answer) counts
    as seeing and seen by nobody.

    Returns:
        (the `Layout`, the tasks that did not take part in time).
    """
    files = files or Files()
    tasks = list(tasks)
    where = probe_directory(directory)
    deadline = clock() + timeout_s
    missing: list[str] = []

    def collect(kind: str, mine) -> dict:
        store.set(f"{namespace}/{kind}/{me}", json.dumps(mine))
        found = {me: mine}
        for task in tasks:
            if task == me:
                continue
            # Past the deadline (a peer that never came used it up), the
            # others still get a short grace to answer.
            value = store.get(
                f"{namespace}/{kind}/{task}", max(min(5.0, timeout_s), deadline - clock())
            )
            if value is None:
                if task not in missing:
                    missing.append(task)
                found[task] = None
            else:
                found[task] = json.loads(value)
        return found

    token = files.create(where)
    try:
        tokens = collect("token", token)
        saw = [t for t in tasks if t != me and tokens.get(t) and files.exists(where, tokens[t])]
        seen = collect("seen", saw)
    finally:
        if token is not None:
            files.remove(where, token)
    return group(tasks, seen), missing
