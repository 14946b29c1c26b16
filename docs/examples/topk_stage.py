"""A user-written gradient stage: top-k sparsification with error feedback.

Each replica keeps the largest `fraction` of every gradient (by magnitude)
and carries the rest over to its next step (error feedback), in a state
variable per model variable that checkpoints, `model.save` and backups
carry. The kept values are dense tensors with zeros elsewhere, summed by
the chain's all-reduce (so `Cast` and `Pack` still apply).

References:
    Stich, Cordonnier, Jaggi. Sparsified SGD with Memory. NeurIPS 2018.
"""

import math

import numpy as np
import tensorflow as tf

import tfdist_opt
from tfdist_opt.gradients import GradientStage


class TopK(GradientStage):
    """Keeps the top `fraction` of each gradient; the rest waits a step."""

    position = "local"  # on this replica's gradients, before the all-reduce
    lossy = True

    def __init__(self, fraction: float):
        if not 0 < fraction <= 1:
            raise ValueError(
                "Invalid value for `fraction`: expected a number in (0, 1]. "
                f"Received: fraction={fraction!r}"
            )
        self.fraction = fraction

    def init(self, variables, context):
        # One residual per variable, per replica (each keeps its own).
        return {v.path: context.add_state(v, "topk_residual") for v in variables}

    def reduce(self, bucket, state, context):
        kept = []
        for g, v in zip(bucket.gradients, bucket.variables):
            residual = state[v.path]
            m = g + tf.cast(residual.value, g.dtype)  # add what was held back
            flat = tf.reshape(m, [-1])
            k = max(1, math.ceil(self.fraction * flat.shape[0]))
            _, idx = tf.math.top_k(tf.abs(flat), k=k)
            sparse = tf.scatter_nd(idx[:, None], tf.gather(flat, idx), tf.shape(flat))
            sparse = tf.reshape(sparse, tf.shape(m))
            residual.assign(m - sparse)  # this replica's new residual
            kept.append(sparse)
        return bucket.replace(kept)


def main():
    strategy = tfdist_opt.opt_strategy(gradient_stages=[TopK(0.1)])
    import keras

    x = np.random.default_rng(0).normal(size=(512, 32)).astype("float32")
    y = (x[:, :4] > 0).argmax(axis=1)
    with strategy.scope():
        model = keras.Sequential(
            [keras.Input((32,)), keras.layers.Dense(64, activation="tanh"), keras.layers.Dense(4)]
        )
        model.compile(
            optimizer=keras.optimizers.SGD(0.05, momentum=0.9),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
    model.fit(x, y, batch_size=64, epochs=2, verbose=2)
    residuals = [v for v in model.optimizer.variables if "topk_residual" in v.path]
    held = sum(int(np.count_nonzero(v.numpy())) for v in residuals)
    print(f"replicas: {strategy.num_replicas_in_sync}, residual variables: {len(residuals)}")
    print(f"values held back for the next step: {'some' if held else 'none'}")


if __name__ == "__main__":
    main()
