"""A peer lost while the preemption watcher polls: no thread traceback (issue 16, item 9).

The watcher thread's key-value reads fail when the coordination service or
a peer is gone; the main thread reports that failure as one summary line,
so the thread must end quietly instead of printing "Exception in thread".
"""

import threading

from tfdist_opt.callbacks import preemption


class LostPeerStore:
    def set(self, key, value):
        return True

    def get(self, key, timeout_s):
        raise RuntimeError("UnavailableError: failed to connect to all addresses")


def test_watcher_ends_quietly_when_the_store_fails(monkeypatch):
    hooked = []
    monkeypatch.setattr(threading, "excepthook", hooked.append)
    agreement = preemption.PreemptionAgreement(
        "worker_0", ["worker_0", "worker_1"], LostPeerStore(), "ns/lost"
    )
    thread = threading.Thread(target=agreement._watch)  # what start() runs
    thread.start()
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert hooked == []  # no traceback printed
    assert "failed to connect" in str(agreement.watch_error)
    assert not agreement.requested  # nothing was learned
