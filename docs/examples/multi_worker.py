"""The same script on every worker: `tfdist-opt launch -n 2 -- python multi_worker.py`."""

import hashlib

import numpy as np

import tfdist_opt

strategy = tfdist_opt.opt_strategy()  # first: multi-worker collectives start here
import keras  # noqa: E402

x = np.arange(256 * 4, dtype="float32").reshape(256, 4) / 1024.0
y = x @ np.array([[1.0], [-2.0], [0.5], [3.0]], dtype="float32")
train = tfdist_opt.build_dataset((x, y), strategy, global_batch_size=32)
with strategy.scope():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
topo = tfdist_opt.detect_topology()
model.fit(train, epochs=2, shuffle=False, verbose=2 if topo.is_chief else 0)
weights = np.concatenate([w.ravel() for w in model.get_weights()])
digest = hashlib.sha256(weights.tobytes()).hexdigest()
print(
    f"{topo.task_type}:{topo.task_index} weights_sha256 {digest} "
    f"after {int(model.optimizer.iterations.numpy())} steps"
)
