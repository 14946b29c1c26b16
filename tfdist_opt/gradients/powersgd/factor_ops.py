"""The dense kernels of PowerSGD's factor step, one per operation.

`skinny_matmul` (the rank-r products P = M Q, Q_i = P^^T M and P^ Q^T),
`orthonormal` (P^ from P) and `SeededNormal` (the same random Q on every
replica). `tfdist_opt.gradients.powersgd.lowrank` composes them into the step.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf


_XLA_DTYPES = (tf.float32, tf.float64)


@tf.function(jit_compile=True)
def xla_matmul(a, b, transpose_b=False):
    return tf.matmul(a, b, transpose_b=transpose_b)


def skinny_matmul(a, b, device, transpose_a=False, transpose_b=False) -> tf.Tensor:
    """`op(a) @ op(b)` where one side has only `rank` columns.

    On a CPU device float32/float64 products go through XLA: TF's oneDNN
    matmul runs these rank-4 products far below memory bandwidth
    (`benchmarks/powersgd_products.py` times both on the benchmark mlp's
    matrices). A transposed `a` (the thin P^ of Q_i = P^^T M) is transposed
    before XLA: XLA's CPU dot is faster on the materialised (rank x n)
    operand than with the transpose inside it (docs/benchmarks-appendix.md, "Figures
    behind the gradient path's design"). Elsewhere (GPU, 16-bit) TF's own.
    """
    if a.dtype in _XLA_DTYPES and is_cpu(device):
        if transpose_a:
            a = tf.transpose(a)
        return xla_matmul(a, b, transpose_b=transpose_b)
    return tf.matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b)


def is_cpu(device: str) -> bool:
    # `device` is one of `extended.worker_devices`: always fully named.
    return tf.DeviceSpec.from_string(device).device_type == "CPU"


def orthonormal(x: tf.Tensor) -> tf.Tensor:
    # Householder QR: orthonormal columns even when x is rank-deficient,
    # and x = QR keeps every column of x in their span (see powersgd.py).
    return tf.linalg.qr(x, full_matrices=False)[0]


class SeededNormal:
    """Keras initializer: the same standard-normal draw on every replica."""

    def __init__(self, seed: int, index: int):
        self.seed, self.index = seed, index

    def __call__(self, shape, dtype=None):
        rng = np.random.default_rng([self.seed, self.index])
        return tf.constant(rng.standard_normal(tuple(shape)), dtype=dtype or "float32")
