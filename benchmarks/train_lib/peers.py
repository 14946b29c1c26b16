"""The peers `--compare=peer` measures: what a TF 2.21 user runs instead.

Each runs in its own processes (one cluster per round, started by
`peer_compare`), because the Keras flavour is fixed at import time
(`TF_USE_LEGACY_KERAS=1` must be set before TensorFlow is imported) and a
process can hold only one MultiWorkerMirroredStrategy:

- `tf_keras`: tf_keras (`TF_USE_LEGACY_KERAS=1`, `tf.keras` is Keras 2) with a
  plain `tf.distribute.MultiWorkerMirroredStrategy()` and `model.fit`;
- `keras3_ctl`: Keras 3 with a plain MultiWorkerMirroredStrategy and a
  hand-written custom training loop (`GradientTape`, `strategy.run`,
  `optimizer.apply_gradients`; Keras 3 `fit` does not run under plain MWMS,
  keras-team/keras#20585).

Both: the same model, synthetic data, seed, SGD (momentum 0.9) and global
batch as ours, TF's default CommunicationOptions, and the input pipeline a
user writes first (`from_tensor_slices -> shuffle -> batch -> repeat ->
prefetch`, distributed by TF with its auto-shard).
"""

from __future__ import annotations

import os
import time

from benchmarks.train_lib import inputs as inputs_lib
from benchmarks.train_lib import models
from benchmarks.train_lib import runner

PEERS = ("tf_keras", "keras3_ctl")
DOC = {
    "tf_keras": "tf_keras (TF_USE_LEGACY_KERAS=1) + plain MultiWorkerMirroredStrategy + model.fit",
    "keras3_ctl": "Keras 3 + plain MultiWorkerMirroredStrategy + a "
    "hand-written custom training loop",
}


def env_for(role: str) -> dict[str, str]:
    """Environment changes a role's processes need (set before TF starts)."""
    return {"TF_USE_LEGACY_KERAS": "1" if role == "tf_keras" else "0"}


class PeerRun:
    """A peer's timed run: the same attributes `report.result_row` reads."""

    def __init__(self, role: str, args, shuffle_buffer: int):
        import tensorflow as tf  # pylint: disable=g-import-not-at-top

        if role == "tf_keras" and os.environ.get("TF_USE_LEGACY_KERAS") != "1":
            raise RuntimeError(
                "The tf_keras peer needs TF_USE_LEGACY_KERAS=1 "
                "set before TensorFlow is imported. Received: "
                f"TF_USE_LEGACY_KERAS="
                f"{os.environ.get('TF_USE_LEGACY_KERAS')!r}"
            )
        # First TF call: the collective runtime starts here.
        self.strategy = tf.distribute.MultiWorkerMirroredStrategy()
        self.role, self.args = role, args
        self.setting = _PeerSetting(role)
        if role == "tf_keras":
            self.keras = tf.keras
            if "tf_keras" not in getattr(self.keras, "__name__", ""):
                raise RuntimeError(
                    f"tf.keras is not tf_keras (Keras 2) here. Received: {self.keras!r}"
                )
            import tf_keras  # pylint: disable=g-import-not-at-top

            self.keras_version = "tf_keras " + tf_keras.__version__
        else:
            import keras  # pylint: disable=g-import-not-at-top

            self.keras = keras
            self.keras_version = "keras " + keras.__version__
        replicas = self.strategy.num_replicas_in_sync
        self.inputs = inputs_lib.Inputs(
            self.strategy,
            "synthetic",
            args.batch_size * replicas,
            args.image_size,
            args.num_classes,
            args.warmup + args.batches,
            args.seed,
            shuffle_buffer,
        )
        self.items_per_window = self.inputs.global_batch * args.window
        self.window_durations: list[float] = []
        self.round_medians: list[float] = []
        self.wall_s = 0.0
        self.model = None

    def _dataset(self):
        import tensorflow as tf  # pylint: disable=g-import-not-at-top

        return self.inputs.naive().prefetch(tf.data.AUTOTUNE)

    def _build(self):
        keras, args = self.keras, self.args
        keras.utils.set_random_seed(args.seed)
        with self.strategy.scope():
            self.model = models.build_model(
                args.model, args.image_size, args.num_classes, keras=keras
            )
            self.optimizer = keras.optimizers.SGD(args.learning_rate, momentum=0.9)

    def run(self, batches: int) -> None:
        """Warm-up plus `batches` timed batches, in windows of `args.window`."""
        self._build()
        started = time.perf_counter()
        if self.role == "tf_keras":
            durations = self._fit(batches)
        else:
            durations = self._custom_loop(batches)
        self.wall_s = time.perf_counter() - started
        w = self.args.window
        self.window_durations = [
            sum(durations[i : i + w]) for i in range(0, len(durations) - w + 1, w)
        ]
        self.round_medians = [self.stats().median]

    def _fit(self, batches: int) -> list[float]:
        keras, args = self.keras, self.args
        with self.strategy.scope():
            self.model.compile(
                optimizer=self.optimizer,
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=list(args.metrics) or None,
            )
        timer = runner.step_timer(args.warmup, 1, 0, keras=keras)
        self.model.fit(
            self._dataset(),
            epochs=1,
            steps_per_epoch=args.warmup + batches,
            verbose=0,
            shuffle=False,
            callbacks=[timer],
        )
        return timer.window_durations

    def _custom_loop(self, batches: int) -> list[float]:
        import tensorflow as tf  # pylint: disable=g-import-not-at-top

        keras, model, optimizer = self.keras, self.model, self.optimizer
        strategy, global_batch = self.strategy, self.inputs.global_batch
        with strategy.scope():
            optimizer.build(model.trainable_variables)
            # What a loop's author writes: metric state updated each step,
            # read (and reduced) when reported, not every step.
            metrics = models.metric_objects(self.args.metrics, keras)
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")

        def replica_step(x, y):
            with tf.GradientTape() as tape:
                logits = model(x, training=True)
                per_example = loss_fn(y, logits)
                loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            for metric in metrics:
                metric.update_state(y, logits)
            return loss

        @tf.function
        def train_step(iterator):
            per_replica = strategy.run(replica_step, args=next(iterator))
            return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

        iterator = iter(strategy.experimental_distribute_dataset(self._dataset()))
        durations = []
        last = time.perf_counter()
        for step in range(self.args.warmup + batches):
            train_step(iterator).numpy()  # like fit: wait for every step
            now = time.perf_counter()
            if step >= self.args.warmup:
                durations.append(now - last)
            last = now
        return durations

    def stats(self):
        from benchmarks import common  # pylint: disable=g-import-not-at-top

        return common.summarize(self.window_durations, self.items_per_window)


class _PeerSetting:
    """The `Setting`-like fields `report.result_row` reads for a peer."""

    def __init__(self, role: str):
        self.name = "peer_" + role
        self.pipeline = "naive+prefetch"
        self.bytes_per_pack, self.compression, self.grad_accum = 0, "none", 1
        self.mixed_precision, self.jit_compile = "off", False
        self.tune_malloc = False
        self.hooked = False  # upstream Keras / tf_keras: never our hooks
