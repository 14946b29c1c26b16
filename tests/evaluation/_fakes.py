"""A fake clock and directory for the pure side-car tests (no sleeping, no disk)."""

import os
import stat as stat_lib
import types


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


class FakeDir:
    """Files as {relative path: (size, mtime_ns)}; directories implied."""

    def __init__(self, root="/ckpt"):
        self.root = root
        self.files = {}
        self.texts = {}

    def write(self, rel, size, mtime_ns, text=None):
        self.files[rel] = (size, mtime_ns)
        if text is not None:
            self.texts[rel] = text

    def remove(self, rel):
        self.files.pop(rel, None)

    def _rel(self, path):
        rel = os.path.relpath(path, self.root)
        return "" if rel == "." else rel

    def listdir(self, path):
        rel = self._rel(path)
        prefix = rel + "/" if rel else ""
        names = {f[len(prefix) :].split("/")[0] for f in self.files if f.startswith(prefix)}
        if not names and rel:
            raise FileNotFoundError(path)
        return sorted(names)

    def stat(self, path):
        rel = self._rel(path)
        if rel in self.files:
            size, mtime = self.files[rel]
            return types.SimpleNamespace(st_size=size, st_mtime_ns=mtime, st_mode=stat_lib.S_IFREG)
        if any(f.startswith(rel + "/") for f in self.files):
            return types.SimpleNamespace(st_size=0, st_mtime_ns=0, st_mode=stat_lib.S_IFDIR)
        raise FileNotFoundError(path)

    def read_text(self, path):
        return self.texts.get(self._rel(path))

    def calls(self):
        return dict(listdir=self.listdir, stat=self.stat, read_text=self.read_text)
