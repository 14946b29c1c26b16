"""Checkpoints of PS-trained models, sharded variables included; resume after a restart.

`tf.train.Checkpoint(model=model)` fails on a Keras 3 model holding a
sharded variable (`AttributeError: 'ShardedVariable' object has no
attribute 'device'` in functional_saver: the Keras variable hands TF the
ShardedVariable as if it were one tensor). `variables_checkpoint` tracks
the TF objects themselves, keyed by variable path, so TF saves each shard
from its parameter server and restores them in place.
"""

from __future__ import annotations

import os
import re

import keras
import tensorflow as tf

from tfdist_opt import runtime
from tfdist_opt.parameter_server import variables as variables_lib


def variables_checkpoint(model: keras.Model, optimizer=None, **extra) -> tf.train.Checkpoint:
    """A `tf.train.Checkpoint` of every model and optimizer variable.

    Args:
        model: a built Keras model.
        optimizer: its optimizer, or None. Defaults to `model.optimizer`'s
            variables not being saved.
        **extra: more trackables (e.g. an epoch counter).
    """
    objects: dict[str, object] = {}

    def add(prefix, v):
        key = prefix + re.sub(r"[^A-Za-z0-9_.-]", "_", getattr(v, "path", v.name))
        while key in objects:
            key += "_"
        objects[key] = variables_lib.raw(v)

    for v in model.variables:
        add("model.", v)
    if optimizer is not None:
        for v in optimizer.variables:
            add("optimizer.", v)
    objects.update(extra)
    return tf.train.Checkpoint(**objects)


class BackupAndRestore(keras.callbacks.Callback):
    """Saves model + optimizer at each epoch end; a restarted `fit` resumes there.

    The parameter-server counterpart of `keras.callbacks.BackupAndRestore`
    for `tfdist_opt.parameter_server.fit`: only the chief runs callbacks, so
    only the chief writes. Sharded variables are saved shard by shard from
    their parameter servers. Restore needs the same sharding (same number
    of ps tasks and partitioner settings).

    Args:
        backup_dir: str. Directory for checkpoints (created).
        max_to_keep: int. Checkpoints kept. Defaults to `2`.
        delete_on_end: bool. Remove the checkpoints when `fit` completes.
            Defaults to `False` (keep them for inspection or inference).

    Example:
        >>> backup = BackupAndRestore("/tmp/ps_backup")  # doctest: +SKIP
        >>> tfdist_opt.parameter_server.fit(model, ds, epochs=5,
        ...                                 steps_per_epoch=100, callbacks=[backup])
    """

    def __init__(self, backup_dir: str, max_to_keep: int = 2, delete_on_end: bool = False):
        super().__init__()
        if not isinstance(backup_dir, (str, os.PathLike)) or not str(backup_dir):
            raise ValueError(
                "Invalid value for `backup_dir`: expected a directory path. "
                f"Received: backup_dir={backup_dir!r}"
            )
        if isinstance(max_to_keep, bool) or not isinstance(max_to_keep, int) or max_to_keep < 1:
            raise ValueError(
                "Invalid value for `max_to_keep`: expected a positive int. "
                f"Received: max_to_keep={max_to_keep!r}"
            )
        self.backup_dir = os.fspath(backup_dir)
        self.max_to_keep = max_to_keep
        self.delete_on_end = delete_on_end
        self.restored_epoch: int | None = None
        self._manager = None
        self._epoch = None

    def on_train_begin(self, logs=None):
        os.makedirs(self.backup_dir, exist_ok=True)
        probe = os.path.join(self.backup_dir, ".write_probe")
        with open(probe, "w", encoding="utf-8") as f:  # unwritable: fail before step 1
            f.write("ok")
        os.remove(probe)
        with tf.init_scope():
            self._epoch = tf.Variable(-1, dtype=tf.int64, trainable=False, name="epoch")
        ckpt = variables_checkpoint(self.model, self.model.optimizer, epoch=self._epoch)
        self._manager = tf.train.CheckpointManager(
            ckpt, self.backup_dir, max_to_keep=self.max_to_keep
        )
        latest = self._manager.latest_checkpoint
        if latest:
            ckpt.restore(latest).assert_existing_objects_matched()
            self.restored_epoch = int(self._epoch.numpy())
            runtime.OBJECTS.of(self.model).resume_epoch = self.restored_epoch + 1

    def on_epoch_end(self, epoch, logs=None):
        self._epoch.assign(epoch)
        self._manager.save(checkpoint_number=epoch)

    def on_train_end(self, logs=None):
        if self.delete_on_end and self._manager is not None:
            for path in self._manager.checkpoints:
                for name in tf.io.gfile.glob(path + "*"):
                    tf.io.gfile.remove(name)
            marker = os.path.join(self.backup_dir, "checkpoint")
            if tf.io.gfile.exists(marker):
                tf.io.gfile.remove(marker)
