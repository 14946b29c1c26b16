"""Runs every cell of the Keras option matrix under one strategy; writes JSON.

A cell is one common `compile`/`fit`/`evaluate`/`predict` option (or a pair)
on a small classifier: 64 examples, global batch 16, SGD from seeded
initial weights, no shuffling, so any strategy that computes the global
batch's mean gradient ends where one device ends. Every cell records its
final weights and fit history, the evaluate and predict results where the
cell needs them (evaluate: baseline, metrics, jit, steps per execution;
predict: wherever outputs or precision differ), or the error it
raised (type and message), and `xla_steps`: for each replica step our
strategies compiled per replica (`jit_compile=True`), whether its traced
function is marked for XLA (`_XlaMustCompile`, the attribute
`tf.function(jit_compile=True)` sets; empty where the path is not taken).

Usage: `python keras_matrix.py --out PATH --strategies none,mirrored[,one_device]`
(one process: `none` is plain Keras with no strategy, the reference;
`mirrored` 2 virtual CPUs; `one_device` opt_strategy on `/cpu:0`) or, under
a 2-worker TF_CONFIG, `--strategies multi_worker` (each worker writes
`PATH.worker<i>.json`, with `iterators`: the class of each worker's
iterator under a distributed dataset, from `experimental_distribute_dataset`
and `distribute_datasets_from_function`). `--cells a,b` runs a subset.
"""

import argparse
import json
import os
import sys
import time
import traceback
import warnings

import numpy as np

import tfdist_opt
from tfdist_opt.keras import xla_steps

N, GLOBAL_BATCH, FEATURES, CLASSES = 64, 16, 8, 3


def _data():
    rng = np.random.RandomState(0)
    x = rng.randn(N, FEATURES).astype("float32")
    y = rng.randint(0, CLASSES, size=(N,)).astype("int32")
    return x, y


def _model(keras, *, sync_bn=False, dict_inputs=False, two_outputs=False, dtype=None):
    init = lambda s: keras.initializers.GlorotUniform(seed=s)
    if dict_inputs:
        a = keras.Input((FEATURES // 2,), name="a")
        b = keras.Input((FEATURES // 2,), name="b")
        inputs = {"a": a, "b": b}
        h = keras.layers.Concatenate()([a, b])
    else:
        inputs = keras.Input((FEATURES,), name="x")
        h = inputs
    h = keras.layers.Dense(16, activation="relu", kernel_initializer=init(1), dtype=dtype)(h)
    if sync_bn:
        h = keras.layers.BatchNormalization(synchronized=True, name="sync_bn")(h)
    logits = keras.layers.Dense(CLASSES, kernel_initializer=init(2), dtype=dtype, name="logits")(h)
    if two_outputs:
        aux = keras.layers.Dense(1, kernel_initializer=init(3), name="aux")(h)
        return keras.Model(inputs, {"logits": logits, "aux": aux})
    return keras.Model(inputs, logits)


def _compile(keras, model, **kwargs):
    kwargs.setdefault("metrics", ["accuracy"])
    model.compile(
        optimizer=keras.optimizers.SGD(0.1),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        **kwargs,
    )


def _tolist(value):
    if isinstance(value, dict):
        return {k: _tolist(v) for k, v in sorted(value.items())}
    if isinstance(value, (list, tuple)):
        return [_tolist(v) for v in value]
    return np.asarray(value, dtype="float64").tolist()


def _outcome(model, history, predictions):
    return {
        "weights": [_tolist(w) for w in model.get_weights()],
        "history": _tolist(history.history),
        "predict": _tolist(predictions),
    }


def standard(
    keras,
    strategy,
    *,
    compile_kwargs=None,
    fit_kwargs=None,
    model_kwargs=None,
    fit_data=None,
    policy=None,
    callbacks=None,
    stages=("evaluate", "predict"),
):
    """Builds, compiles (in the scope, as users do), fits; then `stages`."""
    x, y = _data()
    if policy:
        keras.mixed_precision.set_global_policy(policy)
    try:
        with strategy.scope():
            model = _model(keras, **(model_kwargs or {}))
            kwargs = compile_kwargs() if callable(compile_kwargs) else compile_kwargs
            _compile(keras, model, **(kwargs or {}))
        fit_kwargs = dict(fit_kwargs or {})
        if "steps_per_epoch" not in fit_kwargs:
            fit_kwargs["batch_size"] = GLOBAL_BATCH
        data = fit_data if fit_data is not None else {"x": x, "y": y}
        history = model.fit(
            **data, epochs=2, shuffle=False, verbose=0, callbacks=callbacks, **fit_kwargs
        )
        out = {
            "weights": [_tolist(w) for w in model.get_weights()],
            "history": _tolist(history.history),
        }
        if "evaluate" in stages:
            out["evaluate"] = _tolist(
                model.evaluate(x, y, batch_size=GLOBAL_BATCH, verbose=0, return_dict=True)
            )
        if "predict" in stages:
            out["predict"] = _tolist(model.predict(x, batch_size=GLOBAL_BATCH, verbose=0))
        return out
    finally:
        if policy:
            keras.mixed_precision.set_global_policy("float32")


def _generator(x, y):
    while True:
        for i in range(0, N, GLOBAL_BATCH):
            yield x[i : i + GLOBAL_BATCH], y[i : i + GLOBAL_BATCH]


def _cells(keras):
    x, y = _data()

    class Batches(keras.utils.PyDataset):
        def __len__(self):
            return N // GLOBAL_BATCH

        def __getitem__(self, i):
            s = slice(i * GLOBAL_BATCH, (i + 1) * GLOBAL_BATCH)
            return x[s], y[s]

    weights = np.linspace(0.5, 1.5, N).astype("float32")
    cells = {
        "baseline": {},
        # Metric objects made in the scope (compile_kwargs is called there),
        # as users do: made outside, their variables are not distributed.
        "metrics": {
            "compile_kwargs": lambda: {
                "metrics": [
                    "accuracy",
                    keras.metrics.SparseTopKCategoricalAccuracy(2, name="top2"),
                    keras.metrics.SparseCategoricalCrossentropy(from_logits=True, name="xent"),
                ]
            },
            "stages": ("evaluate",),
        },
        "validation_data": {"fit_kwargs": {"validation_data": (x[:32], y[:32])}, "stages": ()},
        "validation_split": {"fit_kwargs": {"validation_split": 0.25}, "stages": ()},
        "sample_weight": {"fit_kwargs": {"sample_weight": weights}, "stages": ()},
        "class_weight": {"fit_kwargs": {"class_weight": {0: 1.0, 1: 2.0, 2: 0.5}}, "stages": ()},
        "sync_batchnorm": {"model_kwargs": {"sync_bn": True}, "stages": ()},
        "callbacks": {
            "callbacks": [
                keras.callbacks.EarlyStopping(monitor="loss", patience=0),
                keras.callbacks.ReduceLROnPlateau(monitor="loss", patience=0, factor=0.5),
            ],
            "stages": (),
        },
        "generator": {
            "fit_data": {"x": _generator(x, y)},
            "fit_kwargs": {"steps_per_epoch": N // GLOBAL_BATCH},
            "stages": (),
        },
        "py_dataset": {
            "fit_data": {"x": Batches()},
            "fit_kwargs": {"steps_per_epoch": N // GLOBAL_BATCH},
            "stages": (),
        },
        "run_eagerly": {"compile_kwargs": {"run_eagerly": True}, "stages": ()},
        "mixed_float16": {"policy": "mixed_float16", "stages": ("predict",)},
        "mixed_bfloat16": {"policy": "mixed_bfloat16", "stages": ("predict",)},
        "jit_compile": {"compile_kwargs": {"jit_compile": True}},
        "jit_compile_sync_batchnorm": {
            "compile_kwargs": {"jit_compile": True},
            "model_kwargs": {"sync_bn": True},
            "stages": (),
        },
        "steps_per_execution": {"compile_kwargs": {"steps_per_execution": 4}},
        "steps_per_execution_jit": {
            "compile_kwargs": {"steps_per_execution": 4, "jit_compile": True},
            "stages": (),
        },
    }
    return cells


def dict_cells(keras, strategy):
    """Cells with their own data layout (dict inputs, dict outputs)."""
    x, y = _data()
    half = FEATURES // 2
    xd = {"a": x[:, :half], "b": x[:, half:]}

    def dict_inputs():
        with strategy.scope():
            model = _model(keras, dict_inputs=True)
            _compile(keras, model)
        history = model.fit(xd, y, batch_size=GLOBAL_BATCH, epochs=2, shuffle=False, verbose=0)
        return _outcome(model, history, model.predict(xd, batch_size=GLOBAL_BATCH, verbose=0))

    def dict_outputs(policy=None):
        if policy:
            keras.mixed_precision.set_global_policy(policy)
        try:
            with strategy.scope():
                model = _model(keras, two_outputs=True)
                model.compile(
                    optimizer=keras.optimizers.SGD(0.1),
                    loss={
                        "logits": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                        "aux": "mse",
                    },
                    metrics={"logits": ["accuracy"]},
                )
            ys = {"logits": y, "aux": x[:, :1]}
            history = model.fit(x, ys, batch_size=GLOBAL_BATCH, epochs=2, shuffle=False, verbose=0)
            return _outcome(model, history, model.predict(x, batch_size=GLOBAL_BATCH, verbose=0))
        finally:
            if policy:
                keras.mixed_precision.set_global_policy("float32")

    def tuple_outputs():
        with strategy.scope():
            inputs = keras.Input((FEATURES,))
            init = keras.initializers.GlorotUniform(seed=4)
            h = keras.layers.Dense(4, kernel_initializer=init)(inputs)
            model = keras.Model(inputs, (h, keras.layers.Activation("tanh")(h)))
        predictions = model.predict(x, batch_size=GLOBAL_BATCH, verbose=0)
        return {"predict": _tolist(predictions), "predict_type": type(predictions).__name__}

    return {
        "dict_inputs": dict_inputs,
        "dict_outputs": dict_outputs,
        "dict_outputs_bfloat16": lambda: dict_outputs("mixed_bfloat16"),
        "tuple_outputs": tuple_outputs,
    }


_XLA_STEPS = []


def _record_xla_steps():
    """Wraps the per-replica trace check to record each step's XLA mark."""
    original = xla_steps._why_not_compilable

    def record(fn, data):
        reason = original(fn, data)
        if reason is not None:  # falls back: the function never runs
            return reason
        attr = fn.get_concrete_function(data).function_def.attr
        _XLA_STEPS.append("_XlaMustCompile" in attr and attr["_XlaMustCompile"].b)
        return reason

    xla_steps._why_not_compilable = record


def run_all(strategy, only):
    import keras

    results = {}
    fns = {
        name: (lambda kw=kw: standard(keras, strategy, **kw)) for name, kw in _cells(keras).items()
    }
    fns.update(dict_cells(keras, strategy))
    for name, fn in fns.items():
        if only and name not in only:
            continue
        start = time.perf_counter()
        _XLA_STEPS.clear()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                results[name] = {"status": "ok", **fn()}
            except Exception as e:  # recorded for the test to judge
                results[name] = {
                    "status": "error",
                    "type": type(e).__name__,
                    "message": str(e)[-2000:],
                    "traceback": traceback.format_exc()[-3000:],
                }
        results[name]["warnings"] = [
            str(w.message)[:500] for w in caught if "tfdist_opt" in str(w.message)
        ]
        results[name]["xla_steps"] = list(_XLA_STEPS)
        results[name]["seconds"] = round(time.perf_counter() - start, 2)
        print(f"cell {name}: {results[name]['status']} ({results[name]['seconds']} s)", flush=True)
    return results


def iterator_kinds(strategy):
    """The class of each per-worker iterator the strategy's datasets make."""
    import tensorflow as tf

    ds = tf.data.Dataset.range(8).batch(4)
    made = {
        "experimental_distribute_dataset": strategy.experimental_distribute_dataset(ds),
        "distribute_datasets_from_function": strategy.distribute_datasets_from_function(
            lambda ctx: tf.data.Dataset.range(8).batch(2)
        ),
    }
    return {
        name: [
            type(w._iterator).__name__  # pylint: disable=protected-access
            for w in iter(d)._iterators
        ]  # pylint: disable=protected-access
        for name, d in made.items()
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--strategies", required=True)
    parser.add_argument("--cells", default="")
    args = parser.parse_args()
    only = set(filter(None, args.cells.split(",")))
    _record_xla_steps()
    kinds = args.strategies.split(",")
    strategies = {}
    # Virtual CPUs first: they must exist before TF's runtime starts.
    for kind in sorted(kinds, key=lambda k: k != "mirrored"):
        if kind == "none":
            continue
        strategies[kind] = tfdist_opt.opt_strategy(
            mode=kind, cpu_replicas=2 if kind == "mirrored" else 0, storage_sharing="per_worker"
        )
    import tensorflow as tf

    strategies["none"] = tf.distribute.get_strategy()  # plain Keras, no scope
    topo = tfdist_opt.detect_topology()
    out = {kind: run_all(strategies[kind], only) for kind in kinds}
    if "multi_worker" in strategies:
        out["iterators"] = iterator_kinds(strategies["multi_worker"])
    path = args.out if topo.tf_config is None else f"{args.out}.worker{topo.task_index}.json"
    with open(path + ".tmp", "w") as f:
        json.dump(out, f)
    os.replace(path + ".tmp", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
