"""Keras logs under 2 workers, reduced packed and one value at a time.

Prints one JSON line per mode ("packed", "per_value"): the per-step logs of
a 3-metric classifier fitted from the same initial weights on the same
data, the final weights, the packed log collectives `fit`'s traced steps
issued (`fit_packed`), and the collective ops one traced Keras train step
holds (Keras's own `reduce_per_replica`, counted in the step's graph and
every function it calls).
"""

import json

import numpy as np
import tensorflow as tf
import keras
from keras.src.backend.tensorflow import trainer as keras_trainer

import tfdist_opt
from tests.multiworker.scripts import step_logs
from tests.multiworker.scripts.step_logs import Logs

strategy = tfdist_opt.opt_strategy()
rank = strategy.cluster_resolver.task_id
x, y = step_logs.data()


def build():
    keras.utils.set_random_seed(1)
    with strategy.scope():
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(3, activation="softmax")])
        model.compile(
            optimizer=keras.optimizers.SGD(0.1),
            loss="sparse_categorical_crossentropy",
            metrics=[
                "sparse_categorical_accuracy",
                keras.metrics.SparseTopKCategoricalAccuracy(k=2),
                keras.metrics.SparseCategoricalCrossentropy(),
            ],
        )
    return model


def count_collectives(model):
    ds = strategy.experimental_distribute_dataset(
        tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
    )

    @tf.function
    def step(data):
        out = strategy.run(model.train_step, args=(data,))
        return keras_trainer.reduce_per_replica(out, strategy, reduction="auto")

    graph_def = step.get_concrete_function(next(iter(ds))).graph.as_graph_def()
    nodes = list(graph_def.node)
    for fn in graph_def.library.function:
        nodes.extend(fn.node_def)
    return sum(1 for n in nodes if n.op.startswith("CollectiveReduce"))


for mode, packed in (("per_value", False), ("packed", True)):
    type(strategy)._pack_log_reductions = packed
    packer = strategy._log_packer
    packer.collectives = 0
    model = build()
    logs = Logs()
    model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0, callbacks=[logs])
    out = {
        "mode": mode,
        "logs": logs.steps,
        "weights": [w.tolist() for w in model.get_weights()],
        "fit_packed": packer.collectives,
        "collectives": count_collectives(build()),
    }
    print("RESULT " + json.dumps(out), flush=True)
