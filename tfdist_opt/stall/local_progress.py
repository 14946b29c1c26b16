"""`LocalProgress`: this worker's position, as the training thread writes it.

The only state the training thread touches for the stall inspector: one
tuple replaced per progress event, read by the inspector's thread
(`tfdist_opt.stall.inspector`) once a poll. No I/O, no lock. Pure Python.
"""

from __future__ import annotations

import time
from typing import Callable


class LocalProgress:
    """This worker's position, written by the training thread only.

    The state is one tuple `(seq, step, phase, since)` replaced as a whole,
    so the inspector thread never reads half an update.
    """

    def __init__(self, clock: Callable[[], float] = time.time):
        self._clock = clock
        self.state = (0, 0, "callbacks", clock())

    def enter(self, phase: str, step: int | None = None) -> None:
        """A new progress event (the same events, in order, on every worker)."""
        seq, old_step, _, _ = self.state
        self.state = (seq + 1, old_step if step is None else step, phase, self._clock())

    def label(self, phase: str) -> str:
        """Relabels the current event (no new event: not every worker saves);
        returns the previous phase."""
        seq, step, old, _ = self.state
        self.state = (seq, step, phase, self._clock())
        return old
