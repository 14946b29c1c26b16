"""PowerSGD low-rank gradient compression: the pure decisions.

No TensorFlow import. Which gradients are compressed, at what rank, how
many bytes a step sends, and the settings' checks; the TensorFlow stage
that runs it is `tfdist_opt.gradients.powersgd.lowrank`.

The algorithm (Vogels, Karimireddy, Jaggi 2019; PyTorch's DDP
`powerSGD_hook`), per replica i and per selected gradient viewed as a
matrix G_i (n x m; a conv kernel [kh, kw, cin, cout] is viewed as
[kh*kw*cin, cout], every leading dimension folded into the rows, the way
the kernel multiplies its input patches):

    M_i = G_i + E_i                      (error feedback)
    P   = SUM_i M_i Q                    (all P's of a step: ONE collective)
    P^  = orthonormal basis of P         (Householder QR)
    Q_i = M_i^T P^
    Q   = SUM_i Q_i                      (all Q's of a step: ONE collective)
    out = P^ Q^T  = SUM_i P^ P^^T M_i    (a SUM, as the uncompressed path)
    E_i = M_i - out / n                  (residual, kept per replica)

Q starts from a normal draw every replica makes from the same seed and is
warm-started (the next step starts from this step's Q, orthonormalised).
The residual is PyTorch's (M_i minus the averaged approximation), not the
paper's local one (Algorithm 2: M_i minus its own decompressed
contribution P^ Q_i^T): both sum to the same total, so `sum(applied) +
sum_i E_i == sum(true gradients)` holds either way, and PyTorch's is one
fused in-place update from the approximation the step returns anyway,
where the local one needs a per-replica outer product and a second pass.
At full rank the local residuals are 0 and PyTorch's are M_i - mean(M),
which sum to 0: the next step's SUM, hence training, is the same.

Householder QR (not Gram-Schmidt with an epsilon) always returns
orthonormal columns, even for a rank-deficient P, and P = Q^ R puts every
column of P in their span. So with r = min(n, m) the projection keeps all
of M and the step equals the uncompressed SUM up to float rounding: the
exactness check of the tests.

Selection (`plan`): float gradients of rank >= 2 with
`min_compression * (n + m) * r <= n * m` (the rank-r factors are at least
`min_compression` times smaller; 0 selects every matrix), r = min(R, n, m).
Everything else (biases, norms, small matrices, `IndexedSlices`) travels
through the ordinary packed all-reduce of the same step.

References:
    Vogels, Karimireddy, Jaggi 2019, "PowerSGD: Practical Low-Rank Gradient
    Compression for Distributed Optimization" (arXiv:1905.13727).
    PyTorch `torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

from tfdist_opt import validation

WIRES = ("none", "bf16", "fp16")
WIRE_BYTES = {"none": None, "bf16": 2, "fp16": 2}
DEFAULT_RANK = 4
DEFAULT_START_STEP = 100
DEFAULT_MIN_COMPRESSION = 2.0
FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")


def check_settings(rank, start_step, min_compression, wire) -> None:
    """Raises a `ValueError` naming the first bad PowerSGD setting."""
    validation.check_int("powersgd_rank", rank, minimum=1)
    validation.check_int("powersgd_start_step", start_step, minimum=0)
    validation.check_number("powersgd_min_compression", min_compression, allow_zero=True)
    validation.check_choice("powersgd_wire", wire, WIRES)


def describe_settings(rank, start_step, min_compression, wire) -> str:
    """One line for `tfdist-opt info`: what `compression="powersgd"` does."""
    return (
        f"PowerSGD rank {rank} from update {start_step} (updates before it "
        f"all-reduce uncompressed); float matrices of rank >= 2 whose rank-"
        f"{rank} factors are >= {min_compression:g}x smaller send factors P, Q "
        "(2 all-reduces, error feedback, warm-started Q); biases, small and "
        "sparse gradients take the packed all-reduce; wire "
        + ("float32" if wire == "none" else wire)
    )


def matrix_shape(shape: Sequence[int | None]) -> tuple[int, int] | None:
    """(rows, cols) a gradient of `shape` is viewed as, or None.

    Rank < 2 or an unknown dimension: None (not a matrix).

    Example:
        >>> matrix_shape((3, 3, 16, 32))
        (144, 32)
        >>> matrix_shape((10,)) is None
        True
    """
    if len(shape) < 2 or any(d is None for d in shape):
        return None
    return int(math.prod(shape[:-1])), int(shape[-1])


@dataclasses.dataclass(frozen=True)
class Matrix:
    """One compressed gradient: its index, matrix view and rank."""

    index: int
    rows: int
    cols: int
    rank: int

    @property
    def factor_elements(self) -> int:
        return (self.rows + self.cols) * self.rank


@dataclasses.dataclass(frozen=True)
class Plan:
    """Which gradients a PowerSGD step compresses, and the bytes it sends.

    Attributes:
        matrices: tuple of `Matrix`, in gradient order.
        rest: tuple of int. Indices sent uncompressed (packed all-reduce).
        dense_bytes: int. Bytes one uncompressed step sends (all float32
            gradients at their own width).
        sent_bytes: int. Bytes one compressed step sends: P and Q factors
            plus the rest, at the wire width.
    """

    matrices: tuple[Matrix, ...]
    rest: tuple[int, ...]
    dense_bytes: int
    sent_bytes: int

    @property
    def ratio(self) -> float:
        return self.dense_bytes / max(1, self.sent_bytes)

    def describe(self) -> str:
        return (
            f"PowerSGD compresses {len(self.matrices)} matrices, "
            f"{len(self.rest)} tensors go uncompressed: "
            f"{self.dense_bytes} -> {self.sent_bytes} bytes per step "
            f"({self.ratio:.1f}x fewer)"
        )


def should_compress(rows: int, cols: int, rank: int, min_compression: float) -> bool:
    """Whether rank-`rank` factors are at least `min_compression` x smaller.

    Example:
        >>> should_compress(100, 100, 4, 2.0)
        True
        >>> should_compress(4, 3, 3, 2.0), should_compress(4, 3, 3, 0)
        (False, True)
    """
    return min_compression * (rows + cols) * rank <= rows * cols


def plan(
    shapes: Sequence[Sequence[int | None]],
    dtypes: Sequence[str],
    rank: int,
    min_compression: float,
    wire: str = "none",
    sparse: Sequence[bool] | None = None,
) -> Plan:
    """Selects the gradients to compress (see the module docstring).

    Args:
        shapes: per gradient, its static shape.
        dtypes: per gradient, its dtype name (`"float32"`...).
        rank: int. `powersgd_rank` R; each matrix uses min(R, n, m).
        min_compression: float. `powersgd_min_compression` C.
        wire: str. `powersgd_wire`: the width the step's bytes travel at.
        sparse: per gradient, whether it is an `IndexedSlices` (never
            compressed). Defaults to all dense.

    Returns:
        A `Plan`.

    Example:
        >>> p = plan([(768, 2048), (2048,)], ["float32"] * 2, 4, 2.0)
        >>> [m.index for m in p.matrices], p.rest
        ([0], (1,))
    """
    sparse = sparse or [False] * len(shapes)
    matrices, rest = [], []
    dense = sent = 0
    for i, (shape, dtype, is_sparse) in enumerate(zip(shapes, dtypes, sparse)):
        size = 4 if dtype not in _WIDTH else _WIDTH[dtype]
        elements = math.prod(d or 0 for d in shape) if shape else 1
        dense += elements * size
        width = min(size, WIRE_BYTES[wire] or size) if dtype in FLOAT_DTYPES else size
        mat = None if is_sparse or dtype not in FLOAT_DTYPES else matrix_shape(shape)
        if mat is not None:
            r = min(rank, *mat)
            if should_compress(*mat, r, min_compression):
                m = Matrix(i, mat[0], mat[1], r)
                matrices.append(m)
                sent += m.factor_elements * width
                continue
        rest.append(i)
        sent += elements * width
    return Plan(tuple(matrices), tuple(rest), int(dense), int(sent))


_WIDTH = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}
