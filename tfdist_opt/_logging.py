"""`log_once`: an absl INFO line printed once per process per message."""

from __future__ import annotations

import threading

from absl import logging

_LOGGED: set[str] = set()
_LOCK = threading.Lock()


def log_once(message: str, warning: bool = False) -> bool:
    """Logs `message` (INFO, or WARNING) unless it was logged before.

    Returns:
        True if this call logged it.
    """
    with _LOCK:
        if message in _LOGGED:
            return False
        _LOGGED.add(message)
    (logging.warning if warning else logging.info)(message)
    return True
