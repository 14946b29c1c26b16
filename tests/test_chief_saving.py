"""Only models built under our multi-worker strategy get chief-aware saving."""

import keras
import tensorflow as tf

from tfdist_opt.strategy import chief_saving


def _model():
    return keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])


def test_plain_tf_distribute_strategy_model_is_not_swapped():
    with tf.distribute.MirroredStrategy(["/cpu:0"]).scope():
        model = _model()
    assert type(model) is keras.Sequential
    assert chief_saving.adopt_models(tf.distribute.get_strategy()) == 0
    assert type(model) is keras.Sequential


def test_saving_class_is_cached_and_keeps_names():
    sub = chief_saving.saving_class(keras.Sequential)
    assert sub is chief_saving.saving_class(keras.Sequential)
    assert chief_saving.saving_class(sub) is sub
    assert (sub.__name__, sub.__module__) == ("Sequential", keras.Sequential.__module__)
    assert issubclass(sub, keras.Sequential)
