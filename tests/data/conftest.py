"""Fixtures for tests/data.

One 2-replica MirroredStrategy for the whole session, with
`ReductionToOneDevice` (what `opt_strategy()` builds on CPUs). Several
MirroredStrategy instances in one process with TF's default collective
all-reduce can collide on collective instance keys ("Shape mismatch in the
collective instance ..."), so tests share this one and use no collectives.
"""

import pytest


@pytest.fixture(scope="session")
def strategy():
    import tensorflow as tf

    return tf.distribute.MirroredStrategy(
        ["/cpu:0", "/cpu:1"], cross_device_ops=tf.distribute.ReductionToOneDevice())
