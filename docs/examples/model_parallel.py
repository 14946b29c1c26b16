"""A model too big for one device: stages of layers on different local devices."""

import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]  # two virtual CPUs stand in for 2 GPUs
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)

import keras  # noqa: E402
import numpy as np  # noqa: E402

from tfdist_opt import model_parallel  # noqa: E402

model = model_parallel.pipeline(
    [
        [keras.layers.Dense(64, activation="relu"), keras.layers.Dense(64, activation="relu")],
        [keras.layers.Dense(64, activation="relu"), keras.layers.Dense(10)],
    ],
    devices="auto",
    micro_batches=4,
    input_shape=(32,),
)
model.compile(
    keras.optimizers.Adam(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True)
)
x = np.random.default_rng(0).normal(size=(256, 32)).astype("float32")
y = (x[:, :10]).argmax(axis=1)
model.fit(x, y, batch_size=64, epochs=2, verbose=2)
print([w.value.device for w in model.weights][::2])
