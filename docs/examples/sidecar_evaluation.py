"""A side-car evaluator beside 2 training workers; one script for every task:

tfdist-opt launch -n 2 --evaluator -- python sidecar_evaluation.py CKPT_DIR
"""

import sys

import numpy as np

import tfdist_opt

strategy = tfdist_opt.opt_strategy()  # every task, first
import keras  # noqa: E402

ckpt_dir = sys.argv[1]  # shared by the workers and the evaluator
x = np.random.default_rng(0).normal(size=(256, 4)).astype("float32")
y = (x[:, 0] > 0).astype("int64")
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2, activation="softmax")])
    model.compile(
        keras.optimizers.SGD(0.5), "sparse_categorical_crossentropy", metrics=["accuracy"]
    )
if tfdist_opt.task_type() == "evaluator":  # TF_CONFIG role; reads no TF state
    metrics = tfdist_opt.SidecarEvaluator(model, (x[:64], y[:64]), ckpt_dir).start()
    print("evaluator: last metrics", metrics)
else:
    model.fit(
        x,
        y,
        batch_size=32,
        epochs=3,
        verbose=0,
        callbacks=[
            keras.callbacks.ModelCheckpoint(
                ckpt_dir + "/weights.{epoch:02d}.weights.h5", save_weights_only=True
            )
        ],
    )
