"""A user stage runs in every configuration that accepts it, or is refused.

A zeroing user stage (a `"local"` stage, and an `"after"` stage) is
planted into each built-in gradient configuration; on 2 virtual CPU
replicas, Adam from the same start, the weights must not move (Adam's
update of a zero gradient from zero moments is exactly zero). A
configuration whose path cannot run the stage must refuse it when the
strategy is made, naming the stage, the setting and what to do, before
any step runs.
"""

import numpy as np
import pytest
import keras
import tensorflow as tf

import tfdist_opt
from tfdist_opt.gradients import GradientOptions
from tfdist_opt.gradients import GradientStage
from tfdist_opt.gradients.binding import keras_binding


class ZeroLocal(GradientStage):
    """Zeroes this replica's gradients before any collective."""

    position = "local"

    def __init__(self):
        self.calls = 0

    def reduce(self, bucket, state, context):
        self.calls += 1
        return bucket.replace([None if g is None else tf.zeros_like(g) for g in bucket.gradients])


class ZeroAfter(ZeroLocal):
    """Zeroes the summed gradients."""

    position = "after"


class SumCollective(GradientStage):
    """A user collective (only checked for its refusal here)."""

    position = "collective"

    def reduce(self, bucket, state, context):
        return bucket.replace(context.all_reduce_sum(bucket.gradients))


# name -> (GradientOptions fields, compile() arguments, mixed precision policy)
CONFIGS = {
    "defaults": ({}, {}, None),
    "streams": ({"collective_streams": 2, "collective_piece_bytes": 64}, {}, None),
    "packs": ({"bytes_per_pack": 100}, {}, None),
    "bf16": ({"compression": "bf16"}, {}, None),
    "powersgd": (
        {
            "compression": "powersgd",
            "powersgd_rank": 1,
            "powersgd_start_step": 0,
            "powersgd_min_compression": 0.0,
        },
        {},
        None,
    ),
    "zero": ({"shard_optimizer_state": True}, {}, None),
    "mixed_precision": ({}, {}, "mixed_float16"),
    "jit_compile": ({}, {"jit_compile": True}, None),
    "steps_per_execution": ({}, {"steps_per_execution": 2}, None),
}

# (config, stage) -> (opt_strategy settings, the message it must raise).
REFUSED = {
    ("accumulation", ZeroLocal): (
        {"grad_accum": 2},
        r"Invalid value for `grad_accum` with the ZeroLocal stage: .*cross-replica.*"
        r"Received: grad_accum=2\. Expected another value, or no ZeroLocal stage",
    ),
    ("accumulation", ZeroAfter): (
        {"grad_accum": 2},
        r"Invalid value for `grad_accum` with the ZeroAfter stage: .*"
        r"Received: grad_accum=2\. Expected another value, or no ZeroAfter stage",
    ),
    ("zero", ZeroAfter): (
        {"shard_optimizer_state": True},
        r"Invalid value for `shard_optimizer_state` with the ZeroAfter stage: .*"
        r"each replica receives only its shard of the summed gradients.*"
        r"Received: shard_optimizer_state=True\. Expected another value, or no ZeroAfter stage",
    ),
    ("zero", SumCollective): (
        {"shard_optimizer_state": True},
        r"Invalid value for `shard_optimizer_state` with the SumCollective stage: .*"
        r"never the whole sums a 'collective' stage maps; a 'local' stage runs with it",
    ),
}

CASES = [
    (name, cls) for name in CONFIGS for cls in (ZeroLocal, ZeroAfter) if (name, cls) not in REFUSED
]


def _fit(strategy, options, compile_kwargs, policy):
    keras_binding.attach(strategy, options)
    keras.utils.set_random_seed(1)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 6)).astype("float32")
    y = rng.normal(size=(64, 3)).astype("float32")
    keras.mixed_precision.set_global_policy(policy or "float32")
    try:
        with strategy.scope():
            model = keras.Sequential(
                [
                    keras.Input((6,)),
                    keras.layers.Dense(8, activation="tanh"),
                    keras.layers.Dense(3, dtype="float32"),
                ]
            )
            model.compile(keras.optimizers.Adam(0.1), "mse", **compile_kwargs)
        before = model.get_weights()
        model.fit(x, y, batch_size=16, epochs=1, shuffle=False, verbose=0)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    return before, model.get_weights()


@pytest.mark.parametrize("name,cls", CASES, ids=[f"{n}-{c.__name__}" for n, c in CASES])
def test_a_zeroing_user_stage_keeps_the_weights(strategy, name, cls):
    fields, compile_kwargs, policy = CONFIGS[name]
    stage = cls()
    before, after = _fit(
        strategy, GradientOptions(stages=[stage], **fields), compile_kwargs, policy
    )
    assert stage.calls >= 1  # traced into the step
    for a, b in zip(after, before):
        np.testing.assert_array_equal(a, b)


def test_without_the_stage_the_weights_move(strategy):
    # The check above has teeth: the same fit with no stage trains.
    before, after = _fit(strategy, GradientOptions(shard_optimizer_state=True), {}, None)
    assert max(float(np.abs(a - b).max()) for a, b in zip(after, before)) > 1e-3


@pytest.mark.parametrize("key", list(REFUSED), ids=[f"{n}-{c.__name__}" for n, c in REFUSED])
def test_configurations_that_cannot_run_the_stage_refuse_it_by_name(key, monkeypatch):
    from tfdist_opt.strategy import topology

    def boom():
        raise AssertionError("the topology was read: the check came too late")

    monkeypatch.setattr(topology, "detect_topology", boom)
    settings, match = REFUSED[key]
    with pytest.raises(ValueError, match=match):
        tfdist_opt.opt_strategy(gradient_stages=[key[1]()], **settings)
