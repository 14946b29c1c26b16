"""Cutting a step's gradients into equal pieces for streamed collectives.

Pure Python (no TensorFlow import). `collective_streams` (see
`tfdist_opt.gradients.collectives.collectives`) all-reduces the gradients of one dtype as a
stream of pieces of at most `piece_elements` elements each: the tensors are
laid end to end in backprop order (the last layer's first, as its gradient
is ready first) and the stream is cut every `piece_elements` elements, so a
large tensor spans several pieces and small ones share a piece. A piece's
collective waits only for the tensors it covers.

Why pieces rather than TF's one pack: on a link-bound step one large
collective moves its bytes in long request/response rounds that leave the
link idle between them, while pieces of a few MB, two in flight, keep it
busy (the Benchmarks page has the figures).
"""

from __future__ import annotations

from typing import NamedTuple, Sequence


class Segment(NamedTuple):
    """Elements `[start, end)` of flat tensor `tensor` inside one piece."""

    tensor: int
    start: int
    end: int


def plan_pieces(
    sizes: Sequence[int], order: Sequence[int], piece_elements: int
) -> list[list[Segment]]:
    """The pieces of a stream of flat tensors.

    Args:
        sizes: element count of each tensor (index = position in `sizes`).
        order: the tensor indices in stream order (each once).
        piece_elements: int > 0. Elements per piece (the last one may hold
            fewer).

    Returns:
        A list of pieces, each a list of `Segment`s in stream order; every
        element of every tensor is in exactly one segment. Empty tensors
        appear in no piece.

    Example:
        >>> plan_pieces([3, 5], order=[1, 0], piece_elements=4)
        [[Segment(tensor=1, start=0, end=4)], [Segment(tensor=1, start=4, end=5), Segment(tensor=0, start=0, end=3)]]
    """
    if piece_elements < 1:
        raise ValueError(
            f"Invalid value for `piece_elements`: expected a positive int. Received: {piece_elements}"
        )
    if sorted(order) != list(range(len(sizes))):
        raise ValueError(
            "Invalid value for `order`: expected each tensor index "
            f"0..{len(sizes) - 1} once. Received: {list(order)}"
        )
    pieces: list[list[Segment]] = []
    current: list[Segment] = []
    room = piece_elements
    for t in order:
        start = 0
        while start < sizes[t]:
            take = min(room, sizes[t] - start)
            current.append(Segment(t, start, start + take))
            start += take
            room -= take
            if room == 0:
                pieces.append(current)
                current, room = [], piece_elements
    if current:
        pieces.append(current)
    return pieces
