"""Keras fit with `compression="auto"` (TFDIST_OPT_COMPRESSION=auto), one worker.

argv: width depth batch steps. An mlp `width`-wide, `depth` hidden layers;
`steps` SGD steps at global `batch`. Prints `RESULT {json}`: the compression
the optimizer ended with, the losses, and a checksum of the weights.
"""

import json
import sys

import numpy as np

import tfdist_opt

width, depth, batch, steps = (int(a) for a in sys.argv[1:5])
strategy = tfdist_opt.opt_strategy()  # before any other TF op

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from tfdist_opt.gradients.binding import hooks  # noqa: E402

keras.utils.set_random_seed(0)
rng = np.random.default_rng(0)
x = rng.standard_normal((batch * steps, width)).astype("float32")
y = rng.integers(0, 10, batch * steps)
with strategy.scope():
    model = keras.Sequential(
        [keras.Input((width,))]
        + [keras.layers.Dense(width, activation="relu") for _ in range(depth)]
        + [keras.layers.Dense(10)]
    )
    model.compile(
        keras.optimizers.SGD(0.01),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch)
history = model.fit(ds, epochs=1, verbose=0)
state = hooks.state_of(model.optimizer)
result = {
    "mode": "auto",
    "compression": state.options.compression,
    # What the optimizer runs: its chain of gradient stages.
    "stages": [stage.name for stage in state.chain.stages],
    "loss": [float(v) for v in history.history["loss"]],
    "checksum": float(sum(float(np.abs(w).sum()) for w in model.get_weights())),
    # The step traced after the pick runs without XLA (`keras_steps`).
    "jit_compile": bool(model.jit_compile),
}
print("RESULT " + json.dumps(result), flush=True)
