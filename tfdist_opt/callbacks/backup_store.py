"""The backup directory as a small transactional store. Pure Python, no TF.

Layout of `backup_dir`:

    backup-<step>/            one complete backup (any files) + MANIFEST
    backup-<step>/manifest.json   written last: position + every file's size and sha256
    latest.json               pointer to the newest committed backup (a hint)
    .staging-<step>/          a save in progress (ignored, removed by the chief)

A save writes everything into `.staging-<step>`, then the manifest (sizes and
SHA-256 of every file, written last, atomically), renames the directory to
`backup-<step>` and replaces `latest.json`. Only then are older backups
pruned, keeping the newest `keep` verified ones: a backup is deleted only
when a verified newer one supersedes it.

`find_restorable` walks the backups from the highest step down and returns
the first one whose manifest parses and whose files all match it, with the
list of newer ones it skipped and why (each reason names the path). A
`latest.json` that is missing, unreadable, not a JSON object, or names a
directory that is gone is reported but never deletes anything: the
directories, not the pointer, are the truth. The checkpoint reader can still
reject a verified backup (the model changed); the caller then asks for the
next older one (`skip`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile

from absl import logging

LATEST = "latest.json"
MANIFEST = "manifest.json"
PREFIX = "backup-"
STAGING = ".staging-"
FORMAT = 1
DEFAULT_KEEP = 2
_POSITION = ("epoch", "calls", "step")


class BackupError(RuntimeError):
    """Backups exist in `backup_dir` but none can be restored."""


@dataclasses.dataclass
class Restorable:
    """A verified backup and what was skipped to reach it.

    Attributes:
        meta: dict or None. `{"name", "epoch", "calls", "step"}` of the
            newest valid backup; None when there is none.
        path: str or None. Its directory.
        skipped: list of str. One line per newer backup (or pointer) that
            was passed over, naming the path and the reason.
    """

    meta: dict | None
    path: str | None
    skipped: list


def _step_of(name: str) -> int | None:
    if not name.startswith(PREFIX):
        return None
    tail = name[len(PREFIX) :]
    return int(tail) if tail.isdigit() else None


def backup_names(backup_dir: str) -> list[str]:
    """`backup-<step>` directory names in `backup_dir`, highest step first."""
    try:
        names = os.listdir(backup_dir)
    except FileNotFoundError:
        return []
    found = [
        (s, n)
        for n in names
        if (s := _step_of(n)) is not None and os.path.isdir(os.path.join(backup_dir, n))
    ]
    return [n for _, n in sorted(found, reverse=True)]


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _files(directory: str) -> list[str]:
    out = []
    for root, _, names in os.walk(directory):
        for n in names:
            rel = os.path.relpath(os.path.join(root, n), directory)
            if rel != MANIFEST:
                out.append(rel)
    return sorted(out)


def atomic_write_text(path: str, text: str) -> None:
    """Writes `path` so a reader sees the old or the new file, never half."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp_")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def write_manifest(directory: str, meta: dict) -> dict:
    """Seals `directory`: records size + sha256 of each file; returns the manifest."""
    manifest = {
        "format": FORMAT,
        **{k: meta[k] for k in ("name", *_POSITION)},
        "files": {
            rel: {
                "size": os.path.getsize(os.path.join(directory, rel)),
                "sha256": _sha256(os.path.join(directory, rel)),
            }
            for rel in _files(directory)
        },
    }
    atomic_write_text(
        os.path.join(directory, MANIFEST), json.dumps(manifest, sort_keys=True, indent=1)
    )
    return manifest


def verify(directory: str, full: bool = True) -> tuple[dict | None, str | None]:
    """(position meta, None) if `directory` matches its manifest, else (None, why).

    Args:
        directory: str. A `backup-<step>` directory.
        full: bool. Also compare checksums (sizes only if False).
    """
    path = os.path.join(directory, MANIFEST)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return _legacy(directory, path)
    except OSError as e:
        return None, f"{path} cannot be read ({e.strerror or e})"
    try:
        manifest = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        return None, f"{path} is not valid JSON ({e}; {len(raw)} bytes)"
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if (
        not isinstance(files, dict)
        or not files
        or any(not isinstance(manifest.get(k), int) for k in _POSITION)
    ):
        return None, (
            f"{path} is not a backup manifest (expected an object "
            "with epoch, calls, step and files)"
        )
    for rel, want in sorted(files.items()):
        fpath = os.path.join(directory, rel)
        try:
            size = os.path.getsize(fpath)
        except OSError:
            return None, f"{fpath} is missing (listed in {MANIFEST})"
        if size != want.get("size"):
            return None, (
                f"{fpath} has {size} bytes, its manifest says "
                f"{want.get('size')} (truncated or overwritten)"
            )
        if full and _sha256(fpath) != want.get("sha256"):
            return None, f"{fpath} does not match its sha256 in {MANIFEST} (corrupt)"
    meta = {k: manifest[k] for k in _POSITION}
    meta["name"] = os.path.basename(os.path.normpath(directory))
    return meta, None


def _legacy(directory: str, manifest_path: str) -> tuple[dict | None, str | None]:
    """A backup of tfdist_opt 0.1.0 (`meta.json`, no manifest): its position,
    unverified (the checkpoint reader is then the only check)."""
    try:
        with open(os.path.join(directory, "meta.json"), "rb") as f:
            meta = json.loads(f.read().decode("utf-8"))
        if all(isinstance(meta.get(k), int) for k in _POSITION):
            return (
                {
                    **{k: meta[k] for k in _POSITION},
                    "name": os.path.basename(os.path.normpath(directory)),
                },
                None,
            )
    except (OSError, ValueError, AttributeError):
        pass
    return None, f"{manifest_path} is missing (the save did not finish)"


def read_pointer(backup_dir: str) -> tuple[dict | None, str | None]:
    """(latest.json's object, None), (None, None) if absent, or (None, why)."""
    path = os.path.join(backup_dir, LATEST)
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None, None
    except OSError as e:
        return None, f"{path} cannot be read ({e.strerror or e})"
    try:
        value = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        what = "empty" if not raw.strip() else f"not valid JSON ({len(raw)} bytes)"
        return None, f"{path} is {what}; ignoring it and scanning the backups"
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None, (
            f"{path} holds {type(value).__name__} {str(value)[:60]!r}, "
            "expected an object with a `name`; ignoring it and "
            "scanning the backups"
        )
    if not os.path.isdir(os.path.join(backup_dir, value["name"])):
        return None, (
            f"{path} names {value['name']}, which does not exist in "
            f"{backup_dir}; scanning the older backups"
        )
    return value, None


def find_restorable(backup_dir: str, skip: int | None = None) -> Restorable:
    """The newest valid backup (below step `skip` if given), and what was passed over.

    Raises:
        BackupError: backups (or a pointer) exist but none is valid: nothing
            is restored and nothing is deleted; the message names each path.
    """
    _, pointer_problem = read_pointer(backup_dir)
    skipped = [pointer_problem] if pointer_problem and skip is None else []
    for name in backup_names(backup_dir):
        if skip is not None and _step_of(name) >= skip:
            continue
        directory = os.path.join(backup_dir, name)
        meta, why = verify(directory)
        if meta is not None:
            return Restorable(meta, directory, skipped)
        skipped.append(f"skipped {directory}: {why}")
    names = backup_names(backup_dir)
    if names or pointer_problem:
        raise BackupError(
            f"No valid backup in {backup_dir}, so training would restart from "
            "step 0; refusing to do that silently. "
            + "; ".join(skipped)
            + ". Move the directory away (or delete it) to start from scratch."
        )
    return Restorable(None, None, skipped)


def restore_newest(backup_dir: str, read, errors: tuple) -> tuple[dict | None, list]:
    """Calls `read(path)` on the newest valid backup; walks back while it raises.

    Args:
        backup_dir: str.
        read: callable(path). Loads one backup directory; raises one of
            `errors` when the checkpoint does not fit (a changed model).
        errors: tuple of exception types meaning "try the next older one".

    Returns:
        (meta or None, skipped lines). Logs the skipped lines as a warning.

    Raises:
        BackupError: backups exist but none can be restored.
    """
    skip, skipped = None, []
    try:
        while True:
            found = find_restorable(backup_dir, skip=skip)
            skipped.extend(found.skipped)
            if found.meta is None:
                return None, skipped
            try:
                read(found.path)
            except errors as e:
                first = (str(e).strip().splitlines() or [""])[0][:300]
                skipped.append(
                    f"skipped {found.path}: its checkpoint cannot be "
                    f"restored into this model ({type(e).__name__}: "
                    f"{first})"
                )
                skip = found.meta["step"]
                continue
            if skipped:
                logging.warning(
                    "tfdist_opt: backup: %s; resuming from %s (step %d)",
                    "; ".join(skipped),
                    found.path,
                    found.meta["step"],
                )
            return found.meta, skipped
    except BackupError as e:
        if skip is None:
            raise
        raise BackupError(
            f"No backup in {backup_dir} can be restored, so training would "
            "restart from step 0; refusing to do that silently. "
            + "; ".join(skipped)
            + ". Move the directory away (or delete it) "
            "to start from scratch."
        ) from e


def commit(
    backup_dir: str, staging: str, meta: dict, keep: int = DEFAULT_KEEP, after_manifest=None
) -> str:
    """Seals `staging`, renames it to `backup-<step>`, points latest.json at it,
    then prunes to the `keep` newest verified backups. Returns the final path."""
    write_manifest(staging, meta)
    if after_manifest is not None:
        after_manifest(meta)
    final = os.path.join(backup_dir, meta["name"])
    if os.path.exists(final):  # the same step saved again (epoch end == batch)
        shutil.rmtree(final)
    os.replace(staging, final)
    atomic_write_text(
        os.path.join(backup_dir, LATEST),
        json.dumps({k: meta[k] for k in ("name", *_POSITION)}, sort_keys=True),
    )
    prune(backup_dir, meta["step"], keep)
    return final


def prune(backup_dir: str, newest_step: int, keep: int = DEFAULT_KEEP) -> list[str]:
    """Deletes backups below `newest_step` (a verified one) beyond the `keep`-1
    newest valid older ones. Backups above it are left alone. Returns deleted."""
    kept, deleted = 1, []
    for name in backup_names(backup_dir):
        if _step_of(name) >= newest_step:
            continue
        directory = os.path.join(backup_dir, name)
        if kept < keep and verify(directory, full=False)[0] is not None:
            kept += 1
            continue
        shutil.rmtree(directory, ignore_errors=True)
        deleted.append(directory)
    return deleted


def remove_staging(backup_dir: str) -> None:
    """Removes leftovers of saves killed before their commit."""
    for name in os.listdir(backup_dir):
        path = os.path.join(backup_dir, name)
        if name.startswith(STAGING) and os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        elif name.startswith(".tmp_") and os.path.isfile(path):
            os.remove(path)


def check_writable(directory: str) -> None:
    """Creates `directory` if needed and proves a file can be written there.

    Raises:
        PermissionError / OSError: naming the directory, before any step.
    """
    try:
        os.makedirs(directory, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=directory, prefix=".tmp_write_check_")
        os.close(fd)
        os.remove(probe)
    except OSError as e:
        raise type(e)(
            e.errno,
            f"backup_dir {directory!r} is not writable "
            f"({e.strerror or e}); no step was run. Pass a "
            "writable directory on storage every worker "
            "sees",
        ) from e


def delete_all(backup_dir: str) -> None:
    """Removes the backups, staging dirs and latest.json (the directory stays)."""
    if not os.path.isdir(backup_dir):
        return
    latest = os.path.join(backup_dir, LATEST)
    if os.path.exists(latest):
        os.remove(latest)
    for name in os.listdir(backup_dir):
        if name.startswith(PREFIX) or name.startswith(STAGING):
            shutil.rmtree(os.path.join(backup_dir, name), ignore_errors=True)
