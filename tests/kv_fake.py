"""An in-memory `tfdist_opt.coordination.kv_store.KeyValueStore`, shared by threads.

The stand-in for the coordination service's key-value store in the tests of
everything that agrees through it (preemption, restore agreement, the
storage probe): `set` refuses an existing key, `get` waits for a key.
"""

import threading


class ThreadStore:
    """`KeyValueStore` over a dict and a condition variable."""

    def __init__(self):
        self.values = {}
        self.cond = threading.Condition()

    def set(self, key, value):
        with self.cond:
            if key in self.values:
                return False
            self.values[key] = value
            self.cond.notify_all()
            return True

    def put(self, key, value):
        with self.cond:
            self.values[key] = value
            self.cond.notify_all()

    def get(self, key, timeout_s):
        with self.cond:
            self.cond.wait_for(lambda: key in self.values, timeout=timeout_s)
            return self.values.get(key)
