"""Text and preprocessing layers train on 2 replicas as on one device, and reload.

`TextVectorization` and `StringLookup` adapted before the scope,
`Normalization` and `IntegerLookup` adapted inside it, `Hashing`; string
inputs. In-process on 2 virtual replicas (tests/conftest.py); the model is
saved and loaded again and predicts the same. Tolerance: rel 1e-5, abs 1e-6
(float32; the all-reduce adds the replicas' halves in another order).
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfdist_opt

RTOL, ATOL = 1e-5, 1e-6
TEXTS = ["the cat sat", "a dog ran", "the dog sat down", "cats and dogs", "a cat", "ran away"] * 4
IDS = np.array([[3], [7], [3], [9], [7], [1]] * 4, dtype="int64")
NUMBERS = np.random.RandomState(0).randn(24, 2).astype("float32") * 3 + 1
LABELS = np.array([0, 1, 0, 1, 1, 0] * 4, dtype="int32")


pytestmark = pytest.mark.usefixtures("no_tf_config")


def _build(strategy):
    vectorize = keras.layers.TextVectorization(max_tokens=20, output_sequence_length=4)
    vectorize.adapt(TEXTS)  # before the scope
    words = keras.layers.StringLookup()
    words.adapt(tf.constant([t.split()[0] for t in TEXTS]))

    def build():
        ids_lookup = keras.layers.IntegerLookup()
        ids_lookup.adapt(IDS)  # inside the scope, when there is one
        normalize = keras.layers.Normalization()
        normalize.adapt(NUMBERS)
        text = keras.Input((), dtype="string", name="text")
        first = keras.Input((1,), dtype="string", name="first")
        ident = keras.Input((1,), dtype="int64", name="ident")
        numbers = keras.Input((2,), name="numbers")
        init = lambda s: keras.initializers.GlorotUniform(seed=s)  # noqa: E731
        tokens = keras.layers.Embedding(20, 3, embeddings_initializer=init(1))(vectorize(text))
        parts = [
            keras.layers.Flatten()(tokens),
            keras.ops.cast(words(first), "float32"),
            keras.ops.cast(ids_lookup(ident), "float32"),
            keras.ops.cast(keras.layers.Hashing(num_bins=5)(first), "float32"),
            normalize(numbers),
        ]
        out = keras.layers.Dense(2, kernel_initializer=init(2))(keras.layers.Concatenate()(parts))
        model = keras.Model({"text": text, "first": first, "ident": ident, "numbers": numbers}, out)
        model.compile(
            keras.optimizers.SGD(0.05),
            keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
        return model

    if strategy is None:
        return build()
    with strategy.scope():
        return build()


def _x():
    return {
        "text": tf.constant(TEXTS),
        "first": tf.constant([[t.split()[0]] for t in TEXTS]),
        "ident": IDS,
        "numbers": NUMBERS,
    }


def test_text_preprocessing_on_two_replicas_equals_one_device_and_reloads(tmp_path):
    one = _build(None)
    one_history = one.fit(_x(), LABELS, batch_size=8, epochs=2, shuffle=False, verbose=0).history
    ours = _build(tfdist_opt.opt_strategy(cpu_replicas=2))
    history = ours.fit(_x(), LABELS, batch_size=8, epochs=2, shuffle=False, verbose=0).history
    for key in one_history:
        np.testing.assert_allclose(history[key], one_history[key], rtol=RTOL, atol=ATOL)
    for u, v in zip(one.get_weights(), ours.get_weights()):
        if np.asarray(u).dtype.kind in "fc":
            np.testing.assert_allclose(v, u, rtol=RTOL, atol=ATOL)
    path = str(tmp_path / "text.keras")
    ours.save(path)
    loaded = keras.models.load_model(path)
    np.testing.assert_allclose(
        loaded.predict(_x(), verbose=0), ours.predict(_x(), verbose=0), rtol=RTOL, atol=ATOL
    )
