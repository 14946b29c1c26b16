"""Bug reports: training under 2 replicas equals one device (fit, evaluate, custom loops).

Each test: a user's report, the code as filed (docs/guides/bug-reports.md).
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.bug_reports.support import RTOL, one_device, two_replicas

pytestmark = pytest.mark.usefixtures("no_tf_config")


def test_keras_19891_evaluate_and_fit_do_not_depend_on_replicas():
    """https://github.com/keras-team/keras/issues/19891 (2024-06).

    Reporter: with 4 replicas `evaluate` disagreed with the loss computed
    from `predict`, and one `fit` step trained differently than with one.
    """
    batch_size = 12
    x = np.random.RandomState(0).uniform(-1, 1, (batch_size, 1)).astype("float32")
    y = np.random.RandomState(1).uniform(-1, 1, (batch_size, 10)).astype("float32")

    def run(strategy):
        with strategy.scope():
            inp = keras.Input(shape=(1,))
            layer = keras.layers.Dense(10, kernel_initializer=keras.initializers.GlorotUniform(3))
            model = keras.Model(inp, layer(inp))
            model.compile(loss="mse", optimizer="sgd")
            gt = np.mean((model.predict(x, batch_size=batch_size, verbose=0) - y) ** 2)
            evaluated = model.evaluate(x, y, batch_size=batch_size, verbose=0)
            model.fit(x, y, batch_size=batch_size, epochs=1, verbose=0)
        return gt, evaluated, [np.asarray(w) for w in model.weights]

    gt, evaluated, weights = run(two_replicas())
    np.testing.assert_allclose(evaluated, gt, rtol=RTOL)
    _, _, reference = run(one_device())
    for got, want in zip(weights, reference):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=1e-7)


def test_keras_21069_embedding_sequence_model_fits():
    """https://github.com/keras-team/keras/issues/21069 (2025-03).

    Reporter: a keras.io example trained on one device but its `fit` failed
    on 2 devices under MirroredStrategy ("Cannot convert a partially known
    TensorShape (1, None) to a Tensor", from the sparse-gradient path of an
    embedding lookup). Reduced: an `Embedding` on variable-length integer
    sequences, trained on 2 replicas, equal to one device.
    """
    x = np.random.RandomState(0).randint(0, 50, (32, 7))
    y = np.random.RandomState(1).randint(0, 2, (32,))

    def run(strategy):
        with strategy.scope():
            inp = keras.Input(shape=(None,), dtype="int32")
            h = keras.layers.Embedding(
                50, 8, embeddings_initializer=keras.initializers.Constant(0.1)
            )(inp)
            h = keras.layers.GlobalAveragePooling1D()(h)
            out = keras.layers.Dense(1, kernel_initializer="ones")(h)
            model = keras.Model(inp, out)
            model.compile(
                keras.optimizers.SGD(0.1), keras.losses.BinaryCrossentropy(from_logits=True)
            )
            model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
        return [np.asarray(w) for w in model.weights]

    for got, want in zip(run(two_replicas()), run(one_device())):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=1e-7)


def test_tensorflow_80951_string_lookup_model_trains():
    """https://github.com/tensorflow/tensorflow/issues/80951 (2024-11).

    Reporter: a model with a float input and a string input (`StringLookup`
    inside), fed by a `tf.data` dataset of both, raised InvalidArgumentError
    in `fit` under MirroredStrategy and trained with the default strategy
    (TF 2.18, Keras 3.7). The reporter's data and inputs; after the lookup,
    reduced to an `Embedding` and a `Dense`. Expected: trains, equal to one
    device.
    """
    float_data = tf.constant([[1.0, 2.0], [3.0, 4.0]], dtype=tf.float32)
    string_data = tf.constant([["foo", "bar"], ["baz", "qux"]], dtype=tf.string)
    labels = tf.constant([[1], [0]], dtype=tf.float32)
    dataset = tf.data.Dataset.from_tensor_slices(((float_data, string_data), labels)).batch(2)

    def run(strategy):
        with strategy.scope():
            input_float = keras.Input(shape=(2,), dtype="float32", name="float_input")
            input_string = keras.Input(shape=(2,), dtype="string", name="string_input")
            lookup = keras.layers.StringLookup(
                vocabulary=["foo", "bar", "baz", "qux"], name="string_lookup"
            )(input_string)
            embedded = keras.layers.Embedding(
                5, 2, embeddings_initializer=keras.initializers.Constant(0.1)
            )(lookup)
            concatenated = keras.layers.Concatenate(name="concatenate")(
                [input_float, keras.layers.Flatten()(embedded)]
            )
            output = keras.layers.Dense(1, activation="sigmoid", kernel_initializer="ones")(
                concatenated
            )
            model = keras.Model([input_float, input_string], output)
            model.compile(
                optimizer=keras.optimizers.SGD(0.1),
                loss="binary_crossentropy",
                metrics=["accuracy"],
            )
        history = model.fit(dataset, epochs=2, verbose=0).history
        return history, [np.asarray(w) for w in model.weights]

    history, weights = run(two_replicas())
    want_history, want_weights = run(one_device())
    np.testing.assert_allclose(history["loss"], want_history["loss"], rtol=RTOL)
    for got, want in zip(weights, want_weights):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=1e-7)


def test_tensorflow_72686_custom_training_loop_applies_gradients():
    """https://github.com/tensorflow/tensorflow/issues/72686 (2024-07).

    Reporter: TF's custom-training tutorial (`tutorials/distribute/
    custom_training`: a Keras model and optimizer, `strategy.run` of a step
    that calls `optimizer.apply_gradients`, the loss averaged over the
    global batch with `tf.nn.compute_average_loss`) got stuck in
    `apply_gradients` under MirroredStrategy with TF 2.16 (Keras 3).
    Fashion-MNIST's shapes (28x28x1, 10 classes), a smaller model.
    Expected: each step applies, equal to one device.
    """
    global_batch = 16
    rng = np.random.RandomState(0)
    images = rng.rand(32, 28, 28, 1).astype("float32")
    image_labels = rng.randint(0, 10, 32)

    def run(strategy):
        dataset = tf.data.Dataset.from_tensor_slices((images, image_labels)).batch(global_batch)
        dist_dataset = strategy.experimental_distribute_dataset(dataset)
        with strategy.scope():
            loss_object = keras.losses.SparseCategoricalCrossentropy(
                from_logits=True, reduction=None
            )
            keras.utils.set_random_seed(1)
            model = keras.Sequential(
                [
                    keras.Input((28, 28, 1)),
                    keras.layers.Conv2D(4, 3, activation="relu"),
                    keras.layers.MaxPooling2D(),
                    keras.layers.Flatten(),
                    keras.layers.Dense(10),
                ]
            )
            optimizer = keras.optimizers.Adam()
            train_accuracy = keras.metrics.SparseCategoricalAccuracy(name="train_accuracy")

        def train_step(inputs):
            x, y = inputs
            with tf.GradientTape() as tape:
                predictions = model(x, training=True)
                per_example_loss = loss_object(y, predictions)
                loss = tf.nn.compute_average_loss(per_example_loss, global_batch_size=global_batch)
            gradients = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(gradients, model.trainable_variables))
            train_accuracy.update_state(y, predictions)
            return loss

        @tf.function
        def distributed_train_step(dataset_inputs):
            per_replica_losses = strategy.run(train_step, args=(dataset_inputs,))
            return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_losses, axis=None)

        losses = [float(distributed_train_step(batch)) for batch in dist_dataset]
        return losses, int(optimizer.iterations), [np.asarray(w) for w in model.weights]

    losses, iterations, weights = run(two_replicas())
    want_losses, _, want_weights = run(one_device())
    assert iterations == 2
    np.testing.assert_allclose(losses, want_losses, rtol=RTOL)
    for got, want in zip(weights, want_weights):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def test_keras_21061_mnist_convnet_loss_stays_finite():
    """https://github.com/keras-team/keras/issues/21061 (2025-03).

    Reporter: keras.io's "Simple MNIST convnet", unchanged but for a
    MirroredStrategy scope on 2 devices, trained to a `nan` loss (Keras
    3.7 to 3.9; every model the reporter tried did the same); a comment
    (2025-04) reduced it to a `Sequential` of one `Identity` layer, mse
    against zeros on inputs of ones, whose loss must be exactly 1.0 and
    read `nan`. MNIST's shapes (28x28x1, 10 classes, one-hot labels),
    batch 128, `validation_split=0.1`. Expected: finite losses; the
    `Identity` model's loss is 1.0, as on one device.
    """
    rng = np.random.RandomState(0)
    x_train = rng.rand(512, 28, 28, 1).astype("float32")
    y_train = keras.utils.to_categorical(rng.randint(0, 10, 512), 10)
    with two_replicas().scope():
        model = keras.Sequential(
            [
                keras.Input(shape=(28, 28, 1)),
                keras.layers.Conv2D(32, kernel_size=(3, 3), activation="relu"),
                keras.layers.MaxPooling2D(pool_size=(2, 2)),
                keras.layers.Conv2D(64, kernel_size=(3, 3), activation="relu"),
                keras.layers.MaxPooling2D(pool_size=(2, 2)),
                keras.layers.Flatten(),
                keras.layers.Dropout(0.5),
                keras.layers.Dense(10, activation="softmax"),
            ]
        )
        model.compile(loss="categorical_crossentropy", optimizer="adam", metrics=["accuracy"])
        history = model.fit(
            x_train, y_train, batch_size=128, epochs=1, validation_split=0.1, verbose=0
        ).history
    for key in ("loss", "accuracy", "val_loss", "val_accuracy"):
        assert np.isfinite(history[key][0]), (key, history)

    def identity_loss(strategy):
        with strategy.scope():
            identity = keras.Sequential([keras.Input(shape=(1,)), keras.layers.Identity()])
            identity.compile(loss="mse", optimizer="sgd")
            return identity.fit(
                tf.ones((128 * 8, 1)), tf.zeros((128 * 8, 1)), batch_size=128, verbose=0
            ).history["loss"]

    assert identity_loss(two_replicas()) == identity_loss(one_device()) == [1.0]


def test_keras_19308_custom_train_step_needs_no_manual_all_reduce():
    """https://github.com/keras-team/keras/issues/19308 (2024-03).

    Reporter: migrating to Keras 3.0.1, a model whose `train_step` computes
    the loss under a `GradientTape` and calls
    `optimizer.apply_gradients(zip(gradients, trainable_weights))` trained
    differently under MirroredStrategy than with Keras 2 (whose optimizer
    summed the replicas' gradients); parity needed a manual
    `tf.distribute.get_replica_context().all_reduce('sum', gradients)`
    before `apply_gradients`, and the reporter asked to do without it.
    The reporter's `train_step` without that line, the loss from
    `compute_loss` (which scales it for the replicas, as Keras 2's compiled
    loss did). Expected: the weights after `fit` equal one device's, and
    every replica holds the same values.
    """
    x = np.random.RandomState(0).rand(64, 8).astype("float32")
    y = np.random.RandomState(1).rand(64, 1).astype("float32")

    class CustomModel(keras.Model):
        def train_step(self, inputs):
            with tf.GradientTape() as tape:
                y_pred = self(inputs[0], training=True)
                loss = self.compute_loss(inputs[0], inputs[1], y_pred)
            trainable_weights = self.trainable_weights
            gradients = tape.gradient(loss, trainable_weights)
            self.optimizer.apply_gradients(zip(gradients, trainable_weights))
            return {"loss": loss}

    def run(strategy):
        with strategy.scope():
            inp = keras.Input(shape=(8,))
            hidden = keras.layers.Dense(
                16, activation="relu", kernel_initializer=keras.initializers.GlorotUniform(1)
            )(inp)
            out = keras.layers.Dense(1, kernel_initializer=keras.initializers.GlorotUniform(2))(
                hidden
            )
            model = CustomModel(inp, out)
            model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
        model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
        return model

    model = run(two_replicas())
    for weight in model.weights:
        copies = [np.asarray(v) for v in weight.value.values]
        assert len(copies) == 2
        np.testing.assert_array_equal(copies[0], copies[1])
    reference = run(one_device())
    for got, want in zip(model.weights, reference.weights):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=RTOL, atol=1e-7)


def test_tensorflow_105552_small_batches_train_without_nan():
    """https://github.com/tensorflow/tensorflow/issues/105552 (2025-12).

    Reporter: a two-layer `Sequential` (Dense 64 relu, Dense 10) trained
    with Adam and mse on random data, batch 8, under MirroredStrategy,
    reached a `nan` loss on some pairs of GPUs and not on others (TF 2.19
    with Keras 3, and TF 2.10). The cause upstream looks tied to the GPU
    pair, which 2 CPU replicas cannot reproduce; what they check is the
    rest of the report. The reporter's model and data, 64 steps instead
    of a million examples. Expected: a finite loss, equal to one device's,
    the weights too.
    """
    rng = np.random.RandomState(0)
    x_train = rng.random((512, 32)).astype(np.float32)
    y_train = rng.random((512, 10)).astype(np.float32)

    def run(strategy):
        with strategy.scope():
            keras.utils.set_random_seed(2)
            model = keras.Sequential(
                [
                    keras.Input(shape=(32,)),
                    keras.layers.Dense(64, activation="relu"),
                    keras.layers.Dense(10, activation=None),
                ]
            )
            model.compile(
                optimizer=keras.optimizers.Adam(),
                loss=keras.losses.MeanSquaredError(),
            )
        history = model.fit(x_train, y_train, epochs=1, batch_size=8, shuffle=False, verbose=0)
        return history.history["loss"], [np.asarray(w) for w in model.weights]

    loss, weights = run(two_replicas())
    assert all(np.isfinite(loss)), loss
    want_loss, want_weights = run(one_device())
    np.testing.assert_allclose(loss, want_loss, rtol=RTOL)
    for got, want in zip(weights, want_weights):
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=1e-7)
