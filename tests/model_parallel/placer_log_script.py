"""Subprocess for test_placer_log: one fit step with the placer log on.

The placer log must be switched on before TensorFlow starts, so this runs
in its own process (3 virtual CPUs; stages on CPU:1 and CPU:2).
"""

import tensorflow as tf

tf.debugging.set_log_device_placement(True)
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 3)

import keras  # noqa: E402
import numpy as np  # noqa: E402

from tfdist_opt import model_parallel  # noqa: E402

model = model_parallel.pipeline(
    [keras.layers.Dense(8, name="s0"), keras.layers.Dense(1, name="s1")],
    devices=["/cpu:1", "/cpu:2"],
    micro_batches=2,
    input_shape=(4,),
    cross_worker=False,
)
model.compile(keras.optimizers.Adam(0.01), "mse")
x = np.ones((8, 4), "float32")
model.fit(x, x[:, :1], batch_size=8, epochs=1, verbose=0)
print("FIT_DONE", flush=True)
