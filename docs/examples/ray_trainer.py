"""Your own Ray Train `TensorflowTrainer`, with tfdist_opt's TensorflowConfig.

`python ray_trainer.py` starts a local Ray (or joins RAY_ADDRESS) and trains
on 2 Ray workers; each calls `opt_strategy()`, which reads the TF_CONFIG that
tfdist_opt's `TensorflowConfig` built from Ray's node addresses.
"""

import ray
from ray.train import ScalingConfig
from ray.train.tensorflow import TensorflowTrainer

from tfdist_opt.launch.ray_backend import TensorflowConfig


def train_fn():
    import numpy as np

    import tfdist_opt

    strategy = tfdist_opt.opt_strategy()  # first: collectives start here
    import keras

    x = np.arange(256 * 4, dtype="float32").reshape(256, 4) / 1024.0
    y = x @ np.array([[1.0], [-2.0], [0.5], [3.0]], dtype="float32")
    train = tfdist_opt.build_dataset((x, y), strategy, global_batch_size=32)
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    history = model.fit(train, epochs=2, shuffle=False, verbose=0)
    rank = ray.train.get_context().get_world_rank()
    print(
        f"rank {rank}: {strategy.num_replicas_in_sync} replicas, "
        f"loss {history.history['loss'][-1]:.6f}",
        flush=True,
    )


if __name__ == "__main__":
    ray.init()
    try:
        trainer = TensorflowTrainer(
            train_fn,
            tensorflow_config=TensorflowConfig(),
            scaling_config=ScalingConfig(num_workers=2),
        )
        trainer.fit()  # raises ray.train.TrainingFailedError if the run failed
    finally:
        ray.shutdown()
