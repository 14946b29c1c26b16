"""A sharded, batched, prefetched input pipeline: tfdist_opt.build_dataset."""

import numpy as np

import tfdist_opt

strategy = tfdist_opt.opt_strategy()
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

x = np.random.default_rng(0).normal(size=(512, 8)).astype("float32")
y = (x.sum(axis=1) > 0).astype("int32")


def augment(features, label):  # random, so after the cache
    return features + tf.random.normal(tf.shape(features), stddev=0.01), label


train = tfdist_opt.build_dataset(
    (x, y),
    strategy,
    global_batch_size=64,
    augment_fn=augment,
    options=tfdist_opt.PipelineOptions(seed=0, cache="memory"),
)
with strategy.scope():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(2)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(train, epochs=2, verbose=2, shuffle=False)  # build_dataset shuffles
