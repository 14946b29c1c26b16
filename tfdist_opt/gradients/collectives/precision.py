"""Which gradients compression touches, and how far it may move them: pure.

No TensorFlow import; dtypes are names (`"float32"`, `"bfloat16"`...).

Rules (`compress_dtype`):

* only floating gradients wider than the wire dtype are cast (float32,
  float64 -> fp16/bf16); integers, bools and already-16-bit floats travel
  untouched;
* fp16 has a 5-bit exponent (max 65504): the value is pre-divided by the
  replica count n before the cast and multiplied back after the sum, so
  |sum_i g_i / n| <= max_i |g_i|: the sum cannot overflow if no single
  local value does. bf16 has float32's exponent and needs no pre-division.

Keras 3 all-reduces *unscaled* gradients (its `LossScaleOptimizer` divides
by the loss scale before the inner optimizer's all-reduce), so fp16
compression together with `mixed_float16` sees ordinary gradient
magnitudes; overflow there needs |g|/n > 65504, underflow starts below
6.1e-5 (subnormals) / 6e-8 (zero). Prefer bf16 when gradients are tiny.

Tolerance (`compression_rtol`): with unit roundoff u (2^-8 for bf16, 2^-11
for fp16: half the spacing of the significand), each gradient is rounded
once when cast, and a RING all-reduce of n replicas rounds each element's
partial sum n-1 more times in the wire dtype. The reduced gradient is
therefore within n*u (first order) of the exact sum, relative to sum |g_i|.
Over T SGD steps on a smooth problem with a small learning rate the weight
*update* w_T - w_0 differs from the uncompressed one by at most about T*n*u
relative to its size (each step's error adds at most once; trajectories do
not separate at first order for small lr*L). Tests use this bound with a
safety factor of 2.

References:
    Micikevicius et al. 2018, "Mixed Precision Training" (loss scaling);
    Kalamkar et al. 2019, "A Study of BFLOAT16 for Deep Learning Training";
    Higham, "Accuracy and Stability of Numerical Algorithms" (gamma_n bound).
"""

from __future__ import annotations

FLOAT_BITS = {"float16": 16, "bfloat16": 16, "float32": 32, "float64": 64}
UNIT_ROUNDOFF = {"float16": 2.0**-11, "bfloat16": 2.0**-8, "float32": 2.0**-24, "float64": 2.0**-53}
FP16_MAX = 65504.0


def compress_dtype(dtype: str, wire_dtype: str | None) -> str | None:
    """The dtype to send `dtype` in, or None to send it untouched.

    Example:
        >>> compress_dtype("float32", "bfloat16")
        'bfloat16'
        >>> compress_dtype("int64", "bfloat16") is None
        True
    """
    if wire_dtype is None or dtype not in FLOAT_BITS:
        return None
    if FLOAT_BITS[dtype] <= FLOAT_BITS[wire_dtype]:
        return None
    return wire_dtype


def predivide_factor(wire_dtype: str | None, num_replicas: int, predivide: bool = True) -> int:
    """What to divide by before the cast (and multiply by after): n for fp16."""
    if predivide and wire_dtype == "float16" and num_replicas > 1:
        return num_replicas
    return 1


def compression_rtol(
    wire_dtype: str, num_replicas: int, steps: int = 1, safety: float = 2.0
) -> float:
    """Relative tolerance for weight updates after `steps` compressed steps.

    Returns safety x steps x n x u (see the module docstring).

    Example:
        >>> round(compression_rtol("bfloat16", 2, steps=3), 4)
        0.0469
    """
    if wire_dtype not in UNIT_ROUNDOFF:
        raise ValueError(
            "Invalid value for `wire_dtype`: expected one of "
            f"{', '.join(sorted(UNIT_ROUNDOFF))}. Received: wire_dtype={wire_dtype!r}"
        )
    return safety * steps * max(1, num_replicas) * UNIT_ROUNDOFF[wire_dtype]


def fp16_sum_overflows(local_max_abs: float, num_replicas: int, predivide: bool) -> bool:
    """Whether an fp16 SUM of n values of size `local_max_abs` overflows."""
    factor = predivide_factor("float16", num_replicas, predivide)
    return local_max_abs / factor * num_replicas > FP16_MAX
