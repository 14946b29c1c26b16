"""The benchmark's Keras models, by name (Keras 3, or tf_keras for a peer)."""

from __future__ import annotations


def build_model(name: str, image_size: int, num_classes: int, keras=None):
    """A model from its name (lookup table; unknown names listed).

    Args:
        name: str. One of `MODELS`.
        image_size, num_classes: int. Input side (x x 3) and outputs.
        keras: module or None. The Keras to build with: Keras 3 by default;
            `tf.keras` under `TF_USE_LEGACY_KERAS=1` for the tf_keras peer
            (every model but `transformer`, which uses `keras.ops`).
    """
    if keras is None:
        import keras  # pylint: disable=g-import-not-at-top,redefined-outer-name

    shape = (image_size, image_size, 3)

    def mlp():
        # Communication-bound: at the default 16x16x3 input, 768-2048-2048-10,
        # 5.8M parameters = 23 MB of float32 gradients per step, little compute.
        return keras.Sequential(
            [
                keras.Input(shape),
                keras.layers.Flatten(),
                keras.layers.Dense(2048, activation="relu"),
                keras.layers.Dense(2048, activation="relu"),
                keras.layers.Dense(num_classes),
            ],
            name="mlp",
        )

    def cnn_small():
        conv = keras.layers.Conv2D
        return keras.Sequential(
            [
                keras.Input(shape),
                conv(32, 3, padding="same", activation="relu"),
                conv(32, 3, padding="same", activation="relu"),
                keras.layers.MaxPooling2D(),
                conv(64, 3, padding="same", activation="relu"),
                conv(64, 3, padding="same", activation="relu"),
                keras.layers.MaxPooling2D(),
                keras.layers.Flatten(),
                keras.layers.Dense(256, activation="relu"),
                keras.layers.Dense(num_classes),
            ],
            name="cnn_small",
        )

    def resnet50():
        return keras.applications.ResNet50(
            weights=None, input_shape=shape, classes=num_classes, classifier_activation=None
        )

    def transformer():
        # A small ViT: 4x4 patches -> 2 pre-norm encoder blocks -> mean pool.
        dim, heads, patch = 64, 4, max(1, min(4, image_size // 2))
        inputs = keras.Input(shape)
        x = keras.layers.Conv2D(dim, patch, strides=patch)(inputs)
        x = keras.layers.Reshape((-1, dim))(x)
        tokens = (image_size // patch) ** 2
        pos = keras.layers.Embedding(tokens, dim)(keras.ops.arange(tokens)[None])
        x = x + pos
        for _ in range(2):
            h = keras.layers.LayerNormalization()(x)
            x = x + keras.layers.MultiHeadAttention(heads, dim // heads)(h, h)
            h = keras.layers.LayerNormalization()(x)
            h = keras.layers.Dense(2 * dim, activation="gelu")(h)
            x = x + keras.layers.Dense(dim)(h)
        x = keras.layers.GlobalAveragePooling1D()(keras.layers.LayerNormalization()(x))
        return keras.Model(inputs, keras.layers.Dense(num_classes)(x), name="transformer")

    table = {"mlp": mlp, "cnn_small": cnn_small, "resnet50": resnet50, "transformer": transformer}
    if name not in table:
        raise ValueError(f"Unrecognized model: {name!r}. Expected one of: {', '.join(table)}.")
    return table[name]()


def metric_objects(names, keras=None) -> list:
    """Metric objects for a custom loop, as `compile(metrics=names)` makes them.

    "accuracy"/"acc" become `SparseCategoricalAccuracy` (the benchmark's labels
    are class indices, its outputs logits), as `compile` resolves them.
    """
    if keras is None:
        import keras  # pylint: disable=g-import-not-at-top,redefined-outer-name

    out = []
    for name in names:
        if name in ("accuracy", "acc"):
            out.append(keras.metrics.SparseCategoricalAccuracy(name=name))
        else:
            out.append(keras.metrics.get(name))
    return out
