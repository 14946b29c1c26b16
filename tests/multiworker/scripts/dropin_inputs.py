"""User code with only the strategy line changed, on each worker (issue 62).

Runs every case of tests/multiworker/test_dropin_inputs.py in one process
(one cluster for all cases: starting one costs more than the cases) and
prints one `RESULT {"mode": case, ...}` line per case, an error as
{"error": "..."}. Without TF_CONFIG it is the one-process reference.

argv[1]: a directory for saved models (each process its own).
"""

import json
import os
import sys

import numpy as np

import tfdist_opt

strategy = tfdist_opt.opt_strategy()

import keras  # noqa: E402

from tests.dropin import dtype_models  # noqa: E402
from tests.dropin import metric_models  # noqa: E402
from tests.multiworker import harness  # noqa: E402

OUT_DIR = sys.argv[1]
RANK = int(json.loads(os.environ.get("TF_CONFIG", '{"task": {"index": 0}}'))["task"]["index"])


def weights(model):
    return [np.asarray(w, dtype="float64").tolist() for w in model.get_weights()]


def every_dtype():
    x, y = dtype_models.features(), dtype_models.labels()
    with strategy.scope():
        model = dtype_models.build_model("dict")
    history = model.fit(**dtype_models.fit_input("dataset", x, y), epochs=1, verbose=0).history
    return {"loss": history["loss"], "weights": weights(model)}


def mnist_uint8():
    """`keras.datasets.mnist.load_data()`'s dtypes and shapes, used as they are."""
    rng = np.random.RandomState(0)
    x = rng.randint(0, 256, size=(64, 28, 28)).astype("uint8")
    y = rng.randint(0, 10, size=(64,)).astype("uint8")
    with strategy.scope():
        model = keras.Sequential(
            [
                keras.Input((28, 28)),
                keras.layers.Rescaling(1 / 255.0),
                keras.layers.Flatten(),
                keras.layers.Dense(10, kernel_initializer=keras.initializers.GlorotUniform(seed=1)),
            ]
        )
        model.compile(
            keras.optimizers.SGD(0.1),
            keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
    history = model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0).history
    return {"history": history, "weights": weights(model)}


def custom_metrics():
    return {**metric_models.run(strategy), "compute_loss": metric_models.run_compute_loss(strategy)}


def registered_model_saving():
    @keras.saving.register_keras_serializable("tfdist_dropin_mw")
    class MyModel(keras.Model):
        def __init__(self, units=2, **kwargs):
            super().__init__(**kwargs)
            self.units = units
            self.dense = keras.layers.Dense(units, kernel_initializer="ones")

        def call(self, x):
            return self.dense(x)

        def get_config(self):
            return {"units": self.units, **super().get_config()}

    with strategy.scope():
        model = MyModel()
        model.compile(keras.optimizers.SGD(0.1), "mse")
    x = np.ones((8, 3), "float32")
    model.fit(x, np.zeros((8, 2), "float32"), batch_size=4, verbose=0)
    path = os.path.join(OUT_DIR, f"rank{RANK}", "model.keras")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    model.save(path)
    loaded = keras.models.load_model(path)
    return {
        "loaded_class": type(loaded).__name__,
        "same": bool(np.allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0))),
    }


def per_worker_data():
    """Ray Train's TensorflowTrainer example: each worker its own shard, batch 1.

    `to_tf(batch_size=1)` on each worker's shard, emulated as Ray's `to_tf`
    builds it: a `from_generator` dataset (its batch size not known before
    step 1), auto-sharding OFF. Worker r gets examples r, r + W, ... in
    batches of 1. The one-process reference gets the same global batches
    ([2k, 2k + 1] on 2 workers) as batches of 2. Each example's id is
    recorded as the generator yields it.
    """
    import tensorflow as tf

    workers = strategy.num_replicas_in_sync if "TF_CONFIG" in os.environ else 1
    rng = np.random.RandomState(0)
    n = 16
    x = rng.randn(n, 3).astype("float32")
    y = rng.randn(n, 1).astype("float32")
    mine = np.arange(n)[RANK::workers] if workers > 1 else np.arange(n)
    batch = 1 if workers > 1 else 2
    seen = []

    def batches():
        for start in range(0, len(mine), batch):
            ids = mine[start : start + batch]
            seen.extend(int(i) for i in ids)
            yield x[ids], y[ids]

    signature = (tf.TensorSpec((None, 3), tf.float32), tf.TensorSpec((None, 1), tf.float32))
    dataset = tf.data.Dataset.from_generator(batches, output_signature=signature)
    opts = tf.data.Options()
    opts.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    dataset = dataset.with_options(opts)
    with strategy.scope():
        model = keras.Sequential(
            [keras.Input((3,)), keras.layers.Dense(1, kernel_initializer="ones")]
        )
        model.compile(keras.optimizers.SGD(0.1), "mse")
    history = model.fit(dataset, epochs=2, verbose=0).history
    return {"loss": history["loss"], "weights": weights(model), "seen": sorted(set(seen))}


def text_preprocessing():
    """tests/dropin/test_text_preprocessing.py's model: strings, lookups, adapt."""
    from tests.dropin import test_text_preprocessing as text

    model = text._build(strategy)
    history = model.fit(
        text._x(), text.LABELS, batch_size=8, epochs=2, shuffle=False, verbose=0
    ).history
    path = os.path.join(OUT_DIR, f"rank{RANK}", "text.keras")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    model.save(path)
    loaded = keras.models.load_model(path)
    same = np.allclose(
        loaded.predict(text._x(), verbose=0), model.predict(text._x(), verbose=0), atol=1e-6
    )
    float_weights = [w for w in model.get_weights() if np.asarray(w).dtype.kind == "f"]
    return {
        "history": history,
        "weights": [np.asarray(w, "float64").tolist() for w in float_weights],
        "reloaded_same": bool(same),
    }


CASES = {
    "text_preprocessing": text_preprocessing,
    "per_worker_data": per_worker_data,
    "every_dtype": every_dtype,
    "mnist_uint8": mnist_uint8,
    "custom_metrics": custom_metrics,
    "registered_model_saving": registered_model_saving,
}
for name in sys.argv[2:] or CASES:
    harness.report(name, CASES[name])
