"""Records what a worker that does not write a directory saved instead.

`install()` wraps `file_writers.scratch_dir` (every non-writer's save goes
through it): each scratch directory is logged with the files found in it
just before it is removed, so a test can name which worker wrote where.
"""

import contextlib
import os

from tfdist_opt.strategy.saving import file_writers

LOG = []


def _files(top):
    return sorted(
        os.path.relpath(os.path.join(root, f), top)
        for root, _, files in os.walk(top)
        for f in files
    )


def install():
    real = file_writers.scratch_dir

    @contextlib.contextmanager
    def recording(prefix):
        with real(prefix) as tmp:
            entry = {"dir": tmp, "files": []}
            LOG.append(entry)
            try:
                yield tmp
            finally:
                entry["files"] = _files(tmp)

    file_writers.scratch_dir = recording


def take():
    """The entries logged since the last call, as plain dicts."""
    out = list(LOG)
    LOG.clear()
    return out
