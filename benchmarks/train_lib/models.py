"""The benchmark's Keras models, by name."""

from __future__ import annotations


def build_model(name: str, image_size: int, num_classes: int):
    """A Keras 3 model from its name (lookup table; unknown names listed)."""
    import keras  # pylint: disable=g-import-not-at-top

    shape = (image_size, image_size, 3)

    def mlp():
        return keras.Sequential([
            keras.Input(shape), keras.layers.Flatten(),
            keras.layers.Dense(512, activation="relu"),
            keras.layers.Dense(512, activation="relu"),
            keras.layers.Dense(num_classes)], name="mlp")

    def cnn_small():
        conv = keras.layers.Conv2D
        return keras.Sequential([
            keras.Input(shape),
            conv(32, 3, padding="same", activation="relu"),
            conv(32, 3, padding="same", activation="relu"),
            keras.layers.MaxPooling2D(),
            conv(64, 3, padding="same", activation="relu"),
            conv(64, 3, padding="same", activation="relu"),
            keras.layers.MaxPooling2D(),
            keras.layers.Flatten(),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(num_classes)], name="cnn_small")

    def resnet50():
        return keras.applications.ResNet50(
            weights=None, input_shape=shape, classes=num_classes,
            classifier_activation=None)

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
        return keras.Model(inputs, keras.layers.Dense(num_classes)(x),
                           name="transformer")

    table = {"mlp": mlp, "cnn_small": cnn_small, "resnet50": resnet50,
             "transformer": transformer}
    if name not in table:
        raise ValueError(f"Unrecognized model: {name!r}. Expected one of: "
                         f"{', '.join(table)}.")
    return table[name]()
