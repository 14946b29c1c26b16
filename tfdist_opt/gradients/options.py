"""`GradientOptions`: what the gradient path does, decided once per strategy.

Pure Python (no TensorFlow import). `tfdist_opt.strategy` builds one from a
`StrategyConfig` and attaches it to the strategy; the Keras binding
(`tfdist_opt.gradients.keras_binding`) gives it to each Keras optimizer
created in that strategy's scope, which keeps it for its lifetime.

The gradient path, in order, for every optimizer step (one *micro*-step when
`grad_accum > 1`):

    local grads -> [accumulate locally, k-1 of k steps stop here]
                -> compress (cast to fp16/bf16, fp16 pre-divided by n)
                -> pack into buckets -> all-reduce SUM (one collective per bucket)
                -> decompress (cast back, x n) -> / k (mean) -> optimizer update
"""

from __future__ import annotations

import dataclasses

COMPRESSIONS = ("none", "fp16", "bf16")
# Bytes per element of the wire dtype, and of the dtypes we never compress.
WIRE_DTYPES = {"fp16": "float16", "bf16": "bfloat16"}


@dataclasses.dataclass(frozen=True)
class GradientOptions:
    """How gradients are packed, compressed and accumulated.

    Args:
        bytes_per_pack: int or `"auto"`. Bucket size in bytes for the
            all-reduce (0: one bucket holding every gradient, TF's default);
            `"auto"`: DDP-style buckets chosen from the gradient sizes by
            `tfdist_opt.gradients.packing.auto_pack_policy`, refined by a
            measured autotune on multi-worker strategies. Defaults to `0`.
        compression: str. `"none"`, `"fp16"` or `"bf16"`: the wire dtype of
            float gradients. Defaults to `"none"`.
        grad_accum: int. Micro-batches accumulated locally before each
            all-reduce and optimizer step (mean semantics). Defaults to `1`.
        predivide: bool. Divide by the replica count before an fp16 cast
            and multiply back after the sum, so the sum of n values can
            never exceed the largest local value (no overflow). Only used
            for `"fp16"`. Defaults to `True`.
        autotune: bool. With `bytes_per_pack="auto"` on a multi-worker
            strategy, time candidate bucket sizes on the real gradient
            shapes when the optimizer is built and keep the fastest.
            Defaults to `True`.
        autotune_csv: str or None. Where the chief writes every autotune
            trial (CSV). Defaults to `None` (trials are logged only).

    Raises:
        ValueError: a value outside the ranges above.
    """

    bytes_per_pack: int | str = 0
    compression: str = "none"
    grad_accum: int = 1
    predivide: bool = True
    autotune: bool = True
    autotune_csv: str | None = None

    def __post_init__(self):
        bpp = self.bytes_per_pack
        if bpp != "auto" and (isinstance(bpp, bool) or not isinstance(bpp, int)
                              or bpp < 0):
            raise ValueError(
                "Invalid value for `bytes_per_pack`: expected a non-negative "
                f'int or "auto". Received: bytes_per_pack={bpp!r}')
        if self.compression not in COMPRESSIONS:
            raise ValueError(
                "Invalid value for `compression`: expected one of "
                f"{', '.join(repr(c) for c in COMPRESSIONS)}. "
                f"Received: compression={self.compression!r}")
        k = self.grad_accum
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(
                "Invalid value for `grad_accum`: expected a positive int. "
                f"Received: grad_accum={k!r}")

    @property
    def wire_dtype(self) -> str | None:
        """Name of the dtype float gradients travel in, or None."""
        return WIRE_DTYPES.get(self.compression)

    @property
    def is_default(self) -> bool:
        """True when TF's own all-reduce path already does everything.

        An int `bytes_per_pack` alone needs no hook: it is passed to TF as
        `CommunicationOptions(bytes_per_pack=...)`.
        """
        return (self.compression == "none" and self.grad_accum == 1
                and self.bytes_per_pack != "auto")

    @classmethod
    def from_config(cls, config) -> "GradientOptions":
        """From a `tfdist_opt.StrategyConfig` (duck-typed: no import)."""
        return cls(bytes_per_pack=config.bytes_per_pack,
                   compression=config.compression,
                   grad_accum=config.grad_accum)
