"""Every input and label dtype Keras takes trains on 2 replicas as on one device.

Keras builds a model under a strategy from its first batch, reduced across
replicas ("MEAN") only to read its shapes: an `AddN` (or a collective on
several workers) per batch component, which TF has for neither bool nor
strings (and on several workers not for uint8, int8, int16, uint16 or
float64). One model here takes a feature of every dtype (`dtype_models`)
and predicts a label of each, in a list of arrays, a dict of arrays and a
`tf.data` dataset; `fit`, `evaluate` and `predict` on 2 virtual replicas
(tests/conftest.py) must equal one device without a strategy, fed the same
global batches. Tolerance: rel 1e-5, abs 1e-5 (float32; the all-reduce sums
the two halves of each batch in another order, and the loss is a sum of 10
outputs' losses: a weight near 0 measured 2.5e-6 apart). 2 workers:
tests/multiworker/test_dropin_inputs.py.
"""

import keras
import numpy as np
import pytest

import tfdist_opt
from tests.dropin import dtype_models as dm

RTOL, ATOL = 1e-5, 1e-5


pytestmark = pytest.mark.usefixtures("no_tf_config")


def _run(kind, strategy):
    x, y = dm.features(), dm.labels()
    if strategy is None:
        model = dm.build_model(kind)
    else:
        with strategy.scope():
            model = dm.build_model(kind)
    history = model.fit(**dm.fit_input(kind, x, y), epochs=1, verbose=0).history
    if kind != "dict":  # evaluate and predict once: each traces its own function
        return model, history, {}, {}
    data = dm.fit_input(kind, x, y)
    data.pop("shuffle", None)
    evaluation = model.evaluate(**data, verbose=0, return_dict=True)
    data.pop("y", None)
    predictions = model.predict(**data, verbose=0)
    return model, history, evaluation, predictions


@pytest.mark.parametrize("kind", ["list", "dict", "dataset"])
def test_every_dtype_trains_on_two_replicas_as_on_one_device(kind):
    one, one_history, one_eval, one_pred = _run(kind, None)
    ours, history, evaluation, pred = _run(kind, tfdist_opt.opt_strategy(cpu_replicas=2))
    assert ours.distribute_strategy.num_replicas_in_sync == 2
    for u, v in zip(one.get_weights(), ours.get_weights()):
        np.testing.assert_allclose(v, u, rtol=RTOL, atol=ATOL)
    assert history.keys() == one_history.keys()
    for key in one_history:
        np.testing.assert_allclose(history[key], one_history[key], rtol=RTOL, atol=ATOL)
    for key in one_eval:
        np.testing.assert_allclose(evaluation[key], one_eval[key], rtol=RTOL, atol=ATOL)
    for key in one_pred:
        np.testing.assert_allclose(pred[key], one_pred[key], rtol=RTOL, atol=ATOL)


def test_strings_alone_train_on_two_replicas():
    """The issue's case: a model taking strings, `StringLookup` inside."""
    import tensorflow as tf

    words = tf.constant([["a"], ["b"], ["c"], ["a"]] * 4)
    labels = np.array([0, 1, 2, 0] * 4, dtype="uint8")

    def build():
        inputs = keras.Input((1,), dtype="string")
        ids = keras.layers.StringLookup(vocabulary=["a", "b", "c"])(inputs)
        h = keras.layers.Embedding(4, 3, embeddings_initializer=keras.initializers.Constant(0.1))(
            ids
        )
        out = keras.layers.Dense(3, kernel_initializer="ones")(keras.layers.Flatten()(h))
        model = keras.Model(inputs, out)
        model.compile(
            keras.optimizers.SGD(0.1),
            keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
        return model

    one = build()
    one.fit(words, labels, batch_size=4, shuffle=False, verbose=0)
    with tfdist_opt.opt_strategy(cpu_replicas=2).scope():
        ours = build()
    ours.fit(words, labels, batch_size=4, shuffle=False, verbose=0)
    for u, v in zip(one.get_weights(), ours.get_weights()):
        np.testing.assert_allclose(v, u, rtol=RTOL, atol=ATOL)
