"""The launch contract: one result, one restart policy, one backend interface.

Every backend (`local`: process groups on this host; `ray`: Ray Train
workers) keeps the same contract: given a `Layout` (the tasks, their GPUs,
the environment to forward) and a command, it places and starts the tasks,
streams their output prefixed `[worker i]`, returns one `LaunchResult`,
restarts the whole group as the `RestartPolicy` says, and leaves nothing
running. Pure Python: nothing here imports TensorFlow or Ray.

One restart rule for every backend: after an attempt that failed (non-zero
exit code), the whole group starts again while restarts remain, unless the
launcher itself was stopped by a signal. The local backend runs that loop
itself (`RestartPolicy.run`); the Ray backend hands the same number to Ray
Train (`FailureConfig(max_failures=R)`), whose controller restarts the group
after a failed attempt and stops on a signal the same way.
"""

from __future__ import annotations

import dataclasses
from typing import IO, Callable, Protocol, Sequence

EXIT_LAUNCH_ERROR = 1  # a worker never joined / the launch itself failed


@dataclasses.dataclass
class LaunchResult:
    """How a launch ended.

    Attributes:
        returncode: int. 0 on success; the first failing worker's exit code
            (128+N for a worker killed by signal N); 128+N when the launcher
            got signal N; `EXIT_LAUNCH_ERROR` when a worker never joined.
        restarts: int. Group restarts performed.
        failed_worker: int or None. Index of the worker that failed last.
        message: str. Why it ended, for humans.
    """

    returncode: int
    restarts: int = 0
    failed_worker: int | None = None
    message: str = ""


@dataclasses.dataclass(frozen=True)
class RestartPolicy:
    """Whole-group restarts after a failure (torchrun's semantics).

    Args:
        max_restarts: int. Restarts after a failed attempt; the group runs
            at most `max_restarts + 1` times. Defaults to `0`.

    Raises:
        ValueError: `max_restarts` is not an int >= 0.

    Example:
        >>> policy = RestartPolicy(max_restarts=2)
        >>> policy.attempts
        3
        >>> policy.should_restart(LaunchResult(1), restarts=0, stopped=False)
        True
    """

    max_restarts: int = 0

    def __post_init__(self):
        r = self.max_restarts
        if isinstance(r, bool) or not isinstance(r, int) or r < 0:
            raise ValueError(
                "Invalid value for `--max-restarts`: expected an int "
                f">= 0. Received: --max-restarts={r!r}"
            )

    @property
    def attempts(self) -> int:
        return self.max_restarts + 1

    def should_restart(self, result: LaunchResult, restarts: int, stopped: bool) -> bool:
        """Restart after `result`? `restarts`: restarts done so far;
        `stopped`: the launcher got a stop signal (never restarted)."""
        return result.returncode != 0 and not stopped and restarts < self.max_restarts

    def run(
        self,
        attempt: Callable[[int], LaunchResult],
        stopped: Callable[[], bool],
        log: Callable[[str], None],
    ) -> LaunchResult:
        """Runs `attempt(restart_count)` until it succeeds or the policy stops.

        Args:
            attempt: callable. Starts the whole group once and returns how
                it ended; its argument is the attempt's restart count (0 for
                the first).
            stopped: callable. True once the launcher got a stop signal.
            log: callable. Prints one `[launch]` line.

        Returns:
            The last attempt's `LaunchResult`, with `restarts` set.
        """
        restarts = 0
        while True:
            result = attempt(restarts)
            result.restarts = restarts
            if not self.should_restart(result, restarts, stopped()):
                return result
            restarts += 1
            log(
                f"{result.message}; restarting the group "
                f"(restart {restarts} of {self.max_restarts})"
            )


class Backend(Protocol):
    """Places and starts a `Layout`'s tasks, as the launch contract says.

    A backend holds its own options (ports and timeouts for `local`; the
    Ray address and storage for `ray`) and exposes one call.
    """

    name: str

    def run(
        self,
        argv: Sequence[str],
        layout,
        policy: RestartPolicy,
        *,
        stdout: IO[str] | None = None,
        stderr: IO[str] | None = None,
    ) -> LaunchResult:
        """Runs `argv` as the layout's tasks; returns how the launch ended."""
