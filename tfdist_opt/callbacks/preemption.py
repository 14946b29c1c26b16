"""Preemption: a SIGTERM on any worker -> every worker saves at one step, then exits.

`DistributedBackupAndRestore` holds one `PreemptionAgreement` per `fit`.
This module is the protocol; the callback does the saving.

Why not `tf.distribute.experimental.PreemptionCheckpointHandler`: its
protocol is the right one and this module follows it (the preempted worker
names the step to save at in the coordination service's key-value store and
waits until every worker has acknowledged it), but the class

- probes the GCE metadata server on construction (up to 5 s, a network call)
  and changes behaviour by platform (on a GCE CPU VM it does nothing; on a
  GCE GPU VM it ignores SIGTERM and polls maintenance events);
- uses fixed, write-once keys, so only the first handler of a process
  works: a second `fit` in the same process never learns of a peer's
  preemption;
- counts steps with its own checkpointed variable and writes
  `workertemp_<i>` directories next to the checkpoint directory;
- never restores the SIGTERM handler it installs.

Protocol (keys under `tfdist_opt/preemption/<n>/`, `n` = this process's
n-th `fit` with preemption handling, the same on every worker):

1. `start()` (at `on_train_begin`, main thread) installs a Python SIGTERM
   handler that only records the signal. Under MultiWorkerMirroredStrategy
   TF has already installed a C-level SIGTERM handler (its preemption
   notifier) that swallows the signal; `signal.signal` replaces it, so
   ours runs (checked on TF 2.21). A watcher thread polls the key
   `save_at` (0.5 s timed reads; no stop key needed).
2. After every real train call the callback calls `check(calls)`, where
   `calls` counts train calls of this `fit` (identical on all workers). On
   a worker that got SIGTERM, the first `check` writes `save_at = calls+1`
   (write-once: if another worker won, its value stands), then waits until
   every task's watcher has written `ack/<task>`. Synchronous all-reduce
   keeps workers within one train call of each other, so no worker can
   have finished call `calls+1` before the announcing worker starts it,
   and every watcher has the value before anyone reaches it.
3. `check` returns True on every worker at `calls == save_at`: the
   callback saves (chief into `backup_dir`, others into temp dirs they
   delete), then `finish()` writes `saved/<task>` and waits for all of
   them, so no worker exits (and makes a launcher stop the others) while
   the chief is still committing. Then the callback raises
   `SystemExit(exit_code)`: `PREEMPTION_EXIT_CODE` (42, TF's Borg restart
   code) by default. `tfdist-opt launch --max-restarts R` restarts the
   group on any non-zero exit; the rerun resumes from that backup.

Without a cluster (one process), a SIGTERM is acted on at the next `check`:
save, exit. If training ends before the agreed step, the run simply
finishes (the job is done).

Limits: a SIGTERM that arrives before `on_train_begin` (under MWMS) is
swallowed by TF's handler; Python runs the handler between train calls, so
a worker stuck inside one long call notices late; after `fit` the previous
Python handler is restored (under MWMS Python reports `SIG_DFL`, so SIGTERM
then ends the process rather than being swallowed by TF); on a preemption
exit of a multi-worker job ours stays installed, so the launcher's SIGTERM
to the other workers cannot kill one mid-save.
"""

from __future__ import annotations

import signal
import threading
import time
from typing import Any, Callable, Mapping

from absl import logging

from tfdist_opt.coordination.kv_store import KeyValueStore  # noqa: F401 (re-export)
from tfdist_opt.coordination.kv_store import TFKeyValueStore  # noqa: F401 (re-export)

PREEMPTION_EXIT_CODE = 42
_PREFIX = "tfdist_opt/preemption"
_POLL_MS = 500
DEFAULT_AGREE_TIMEOUT_S = 120.0

_FIT_LOCK = threading.Lock()
_FIT_SEQ = [0]


def task_names(tf_config: Mapping[str, Any] | None) -> list[str]:
    """`chief_0`, `worker_0`, ...: every task taking part in collectives."""
    if tf_config is None:
        return ["local"]
    cluster = tf_config["cluster"]
    return [
        f"{role}_{i}" for role in ("chief", "worker") for i in range(len(cluster.get(role, [])))
    ]


def next_fit_namespace() -> str:
    """`tfdist_opt/preemption/<n>` for this process's n-th fit (same on all workers)."""
    with _FIT_LOCK:
        _FIT_SEQ[0] += 1
        return f"{_PREFIX}/{_FIT_SEQ[0]}"


class PreemptionAgreement:
    """One fit's SIGTERM watcher and cluster-wide agreement on the step to save at.

    Args:
        me: str. This task's name (`worker_1`; `local` without a cluster).
        tasks: list of str. Every task's name (`task_names`); one entry means
            no cluster: no key-value store, no threads.
        store: `KeyValueStore` or None. Needed when `len(tasks) > 1`.
        namespace: str. Key prefix unique to this fit (`next_fit_namespace`).
        timeout_s: float. Longest wait for acknowledgements / peers' saves.
            Defaults to `120`.
        clock: callable. Seconds, monotonic. Defaults to `time.monotonic`.
    """

    def __init__(
        self,
        me: str,
        tasks: list[str],
        store: KeyValueStore | None,
        namespace: str,
        timeout_s: float = DEFAULT_AGREE_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ):
        if me not in tasks:
            raise ValueError(
                f"Invalid value for `me`: expected one of {tasks}. Received: me={me!r}"
            )
        if len(tasks) > 1 and store is None:
            raise ValueError(
                "Invalid value for `store`: a cluster of "
                f"{len(tasks)} tasks needs a key-value store. "
                "Received: store=None"
            )
        self.me, self.tasks, self.store = me, list(tasks), store
        self.namespace, self.timeout_s, self._clock = namespace, timeout_s, clock
        self.signal_time: float | None = None  # when our SIGTERM arrived
        self.save_at: int | None = None  # agreed train call
        self._learned = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._previous_handler = None
        self._installed = False
        self._announced = False
        self.watch_error: BaseException | None = None  # why the watcher stopped

    @property
    def multi_worker(self) -> bool:
        return len(self.tasks) > 1

    @property
    def requested(self) -> bool:
        """True once this worker got SIGTERM or learned of a peer's."""
        return self.signal_time is not None or self._learned.is_set()

    def _key(self, *parts: str) -> str:
        return "/".join((self.namespace, *parts))

    # ------------------------------------------------------------ life cycle
    def start(self) -> None:
        """Installs the SIGTERM handler (main thread only) and the watcher."""
        if threading.current_thread() is threading.main_thread():
            self._previous_handler = signal.signal(signal.SIGTERM, self._on_sigterm)
            self._installed = True
        else:
            logging.warning(
                "tfdist_opt: fit runs outside the main thread; "
                "SIGTERM cannot be watched (preemption handling off)"
            )
        if self.multi_worker:
            self._thread = threading.Thread(
                target=self._watch, name=f"tfdist_opt-preemption-{self.me}", daemon=True
            )
            self._thread.start()

    def stop(self, restore_handler: bool = True) -> None:
        """Stops the watcher; restores the previous SIGTERM handler if asked."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * _POLL_MS / 1000)
            self._thread = None
        if restore_handler and self._installed:
            signal.signal(signal.SIGTERM, self._previous_handler or signal.SIG_DFL)
            self._installed = False

    def notify(self) -> None:
        """Acts as if this process got SIGTERM now (also the handler's body)."""
        if self.signal_time is None:
            self.signal_time = self._clock()

    def _on_sigterm(self, signum, frame):
        del signum, frame
        self.notify()

    def _watch(self) -> None:
        # A lost peer or coordination service makes the store raise here. The
        # main thread meets the same failure in its next collective and
        # reports it (one summary line); a traceback from this thread would
        # only interleave with that line, so the error is kept, not raised.
        try:
            while not self._stop.is_set():
                value = self.store.get(self._key("save_at"), _POLL_MS / 1000)
                if value is not None:
                    self.save_at = int(value)
                    self._learned.set()
                    self.store.set(self._key("ack", self.me), "1")
                    return
        except Exception as e:  # pylint: disable=broad-except
            self.watch_error = e
            logging.debug(
                "tfdist_opt: preemption watcher stopped: %s: %s",
                type(e).__name__,
                str(e).splitlines()[0] if str(e) else "",
            )

    # ------------------------------------------------------------ per call
    def check(self, calls: int) -> bool:
        """After train call number `calls` (1-based, this fit): save now?"""
        if self.signal_time is not None and not self._announced:
            self._announced = True
            if not self.multi_worker:
                self.save_at = calls
                self._learned.set()
            else:
                self._announce(calls + 1)
        return self._learned.is_set() and self.save_at == calls

    def _announce(self, save_at: int) -> None:
        if self.store.set(self._key("save_at"), str(save_at)):
            logging.info(
                "tfdist_opt: %s got SIGTERM; all workers save after train call %d", self.me, save_at
            )
        self._wait_all("ack", "acknowledge the step to save at")
        self._learned.wait(timeout=self.timeout_s)

    def finish(self) -> None:
        """After this worker's save: waits until every worker has saved."""
        if self.multi_worker:
            self.store.set(self._key("saved", self.me), "1")
            self._wait_all("saved", "finish their preemption save")

    def _wait_all(self, kind: str, what: str) -> None:
        deadline = self._clock() + self.timeout_s
        missing = []
        for task in self.tasks:
            left = deadline - self._clock()
            if left <= 0 or self.store.get(self._key(kind, task), left) is None:
                missing.append(task)
        if missing:
            logging.warning(
                "tfdist_opt: preemption: %s did not %s within %g s",
                ", ".join(missing),
                what,
                self.timeout_s,
            )
