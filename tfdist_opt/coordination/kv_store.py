"""The coordination service's key-value store, as one small interface.

TF's coordination service (on by default under `MultiWorkerMirroredStrategy`)
keeps a key-value store every task reaches: `set_config_key_value` (raises
`AlreadyExistsError` for an existing key) and `get_config_key_value` (blocks
until the key exists, raising `DeadlineExceededError` after its timeout).
It also has a barrier (`wait_at_barrier`: returns once every task reached the
same id, raises `DeadlineExceededError` after its timeout). They have no
`tf.*` export, so this module is the one place that calls them. Users: the
preemption agreement and the restore agreement (`tfdist_opt.callbacks`), the
storage probe that decides who writes a file
(`tfdist_opt.strategy.saving.storage_sharing`), the rendezvous after a second
multi-worker strategy (`tfdist_opt.strategy.kinds.multi_worker`), and the
stall inspector's progress records (`tfdist_opt.stall`, which overwrites
keys with `put`). Tests pass a dict-backed fake with the same methods.
"""

from __future__ import annotations

from typing import Protocol


class KeyValueStore(Protocol):
    """The coordination service's key-value store (TF's eager context)."""

    def set(self, key: str, value: str) -> bool:
        """Writes a new key; False if it already exists."""

    def get(self, key: str, timeout_s: float) -> str | None:
        """The key's value, or None if absent after `timeout_s` seconds."""

    def put(self, key: str, value: str) -> None:
        """Writes a key, replacing its value (the stall inspector's records)."""


class TFKeyValueStore:
    """`KeyValueStore` over `tf.distribute`'s coordination service."""

    def __init__(self):
        from tfdist_opt import private_api  # pylint: disable=g-import-not-at-top

        self._context = private_api.eager_context_module().context()
        self._errors = private_api.tf_errors_module()

    def set(self, key: str, value: str) -> bool:
        try:
            self._context.set_config_key_value(key, value)
            return True
        except self._errors.AlreadyExistsError:
            return False

    def get(self, key: str, timeout_s: float) -> str | None:
        try:
            return self._context.get_config_key_value(key, max(1, int(timeout_s * 1000)))
        except self._errors.DeadlineExceededError:
            return None

    def put(self, key: str, value: str) -> None:
        # No overwrite in the service's API (TF 2.21): delete, then insert. A
        # reader in between waits in `get` until the insert lands.
        try:
            self._context.delete_config_key_value(key)
        except self._errors.NotFoundError:
            pass
        self.set(key, value)

    def barrier(self, barrier_id: str, timeout_s: float) -> bool:
        """Waits until every task reached `barrier_id`; False on timeout."""
        try:
            self._context.wait_at_barrier(barrier_id, max(1, int(timeout_s * 1000)))
            return True
        except self._errors.DeadlineExceededError:
            return False
