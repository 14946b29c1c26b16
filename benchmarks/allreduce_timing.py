"""Building blocks of `benchmarks/allreduce.py`: timers, model shapes, the PowerSGD step.

Each timing is `strategy.run` of one replica function, its median agreed by
the workers (`tfdist_opt.gradients.autotune.timing`). Flags stay in the binary; these
take plain values.
"""

from __future__ import annotations


def all_sum(strategy, values):
    from tfdist_opt.gradients.autotune import timing

    return timing.agree(strategy, values, op="SUM")


def timer(strategy, replica_fn, iters, warmup):
    """Median/min/max seconds of `strategy.run(replica_fn)`, agreed by workers."""
    from tfdist_opt.gradients.autotune import timing

    t = timing.time_and_agree(strategy, replica_fn, iters, warmup)
    return {"time_s": t.median_s, "time_min_s": t.min_s, "time_max_s": t.max_s, "iters": iters}


def scalar(outs):
    import tensorflow as tf

    return tf.add_n([tf.cast(tf.reshape(o, [-1])[0], tf.float32) for o in outs])


def model_shapes(name: str):
    """(shape, dtype) of each trainable variable of the `--model` named `name`."""
    import keras

    if name == "small":
        model = keras.Sequential(
            [
                keras.Input((256,)),
                keras.layers.Dense(1024),
                keras.layers.Dense(1024),
                keras.layers.Dense(10),
            ]
        )
    else:
        model = keras.applications.ResNet50(weights=None)
    return [(tuple(v.shape), "float32") for v in model.trainable_variables]


def powersgd(strategy, shapes, rank, iters, warmup):
    """Times one PowerSGD step over `shapes` through a hooked Keras optimizer."""
    import keras
    import tensorflow as tf

    from tfdist_opt.gradients.binding import keras_binding
    from tfdist_opt.gradients.powersgd import lowrank
    from tfdist_opt.gradients.options import GradientOptions

    saved = keras_binding.options_of(strategy)
    keras_binding.attach(
        strategy,
        GradientOptions(compression="powersgd", powersgd_rank=rank, powersgd_start_step=0),
    )
    try:
        with strategy.scope():
            variables = [keras.Variable(tf.zeros(s, d)) for s, d in shapes]
            opt = keras.optimizers.SGD(0.0)
            opt.build(variables)
            rng = [tf.random.stateless_normal(s, [0, i]) for i, (s, _) in enumerate(shapes)]
    finally:
        keras_binding.attach(strategy, saved or GradientOptions())
    pairs = [v.value for v in variables]

    def step():
        return scalar([g for g, _ in opt._all_reduce_sum_gradients(list(zip(rng, pairs)))])

    return timer(strategy, step, iters, warmup), lowrank.state_of(opt).plan


def numel(shape):
    n = 1
    for s in shape:
        n *= int(s)
    return n
