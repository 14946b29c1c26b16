"""Models and data with every input and label dtype Keras takes (issue 62).

Shared by the in-process tests (tests/dropin/test_input_dtypes.py) and the
2-worker script (tests/multiworker/scripts/dropin_inputs.py). One model
takes a feature of each dtype and predicts a label of each dtype, so one
`fit` covers them all.
"""

from __future__ import annotations

import numpy as np

N = 32
BATCH = 8
FEATURE_DTYPES = (
    "uint8", "int8", "uint16", "int16", "int32", "int64",
    "bool", "float16", "bfloat16", "float64", "string",
)  # fmt: skip
CLASS_LABEL_DTYPES = ("uint8", "int8", "uint16", "int16", "int32", "int64")
FLOAT_LABEL_DTYPES = ("float16", "bfloat16", "float64")


def _np_dtype(name):
    if name == "bfloat16":
        import tensorflow as tf

        return tf.bfloat16.as_numpy_dtype
    if name == "string":
        return object
    return np.dtype(name)


def features(n=N, seed=0):
    """{dtype name: array of shape (n, 2)}, values small enough for every dtype."""
    rng = np.random.RandomState(seed)
    out = {}
    for name in FEATURE_DTYPES:
        if name == "string":
            out[name] = np.array(
                [[f"w{rng.randint(5)}", f"w{rng.randint(5)}"] for _ in range(n)], dtype=str
            )
        elif name == "bool":
            out[name] = rng.randint(0, 2, size=(n, 2)).astype(bool)
        else:
            out[name] = rng.randint(0, 5, size=(n, 2)).astype(_np_dtype(name))
    return out


def labels(n=N, seed=1):
    """{output name: labels}: classes of each integer dtype, targets of each float dtype, bool."""
    rng = np.random.RandomState(seed)
    out = {
        f"cls_{d}": rng.randint(0, 3, size=(n,)).astype(_np_dtype(d)) for d in CLASS_LABEL_DTYPES
    }
    for d in FLOAT_LABEL_DTYPES:
        out[f"reg_{d}"] = rng.randint(0, 4, size=(n, 1)).astype(_np_dtype(d))
    out["bin_bool"] = rng.randint(0, 2, size=(n, 1)).astype(bool)
    return out


def build_model(kind="dict"):
    """A functional model with one input per feature dtype and one output per label.

    Its inputs are a list for the input kind "list", else a dict.
    """
    import keras

    init = lambda s: keras.initializers.GlorotUniform(seed=s)  # noqa: E731
    inputs = {d: keras.Input((2,), dtype=d, name=d) for d in FEATURE_DTYPES}
    parts = []
    for d, x in inputs.items():
        if d == "string":
            x = keras.layers.Hashing(num_bins=7)(x)
        parts.append(keras.ops.cast(x, "float32"))
    h = keras.layers.Dense(8, activation="relu", kernel_initializer=init(1))(
        keras.layers.Concatenate()(parts)
    )
    outputs = {}
    losses = {}
    for i, name in enumerate(labels(n=1)):
        units = 3 if name.startswith("cls_") else 1
        outputs[name] = keras.layers.Dense(units, kernel_initializer=init(10 + i), name=name)(h)
        if name.startswith("cls_"):
            losses[name] = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        elif name.startswith("reg_"):
            losses[name] = "mse"
        else:
            losses[name] = keras.losses.BinaryCrossentropy(from_logits=True)
    model = keras.Model(list(inputs.values()) if kind == "list" else inputs, outputs)
    model.compile(keras.optimizers.SGD(0.05), loss=losses)
    return model


def fit_input(kind, x, y, batch=BATCH):
    """`fit`'s keyword arguments for an input kind: "list", "dict" or "dataset"."""
    import tensorflow as tf

    # Keras's array adapter refuses NumPy string arrays ("Invalid dtype"):
    # strings go in as string tensors, as users pass them.
    x = {d: tf.constant(v) if d == "string" else v for d, v in x.items()}
    if kind == "list":
        return dict(x=[x[d] for d in FEATURE_DTYPES], y=y, batch_size=batch, shuffle=False)
    if kind == "dict":
        return dict(x=x, y=y, batch_size=batch, shuffle=False)
    return dict(x=tf.data.Dataset.from_tensor_slices((x, y)).batch(batch))
