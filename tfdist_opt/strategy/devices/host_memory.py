"""glibc malloc settings that keep collective receive buffers mapped.

Each TF collective allocates fresh receive/chunk buffers. glibc serves
allocations above its mmap threshold (128 KiB, adjusted dynamically) with
`mmap` and returns them on free, and TF sets `M_TRIM_THRESHOLD=128 KiB`, so
on CPU hosts every RING all-reduce step first-touches (page-faults and
zeroes) its buffers again: one minor fault per 4 KiB received, most of the
workers' CPU time in the kernel. Raising the mmap threshold to glibc's
maximum (32 MiB on 64-bit) and the trim threshold keeps freed buffers in
the heap for reuse. Buffers above 32 MiB are still mmapped whatever the
setting, so keep gradient packs <= 16 MiB (ring chunks are pack / workers).
What it buys is measured by `benchmarks/allreduce.py` (docs/benchmarks.md,
"All-reduce on CPU hosts").

`mallopt` is process-wide and changeable at any time (later allocations
follow it), so benchmarks can switch it per measured setting. Pure Python
(ctypes); a no-op, said once in the log, where glibc is not the allocator.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

from absl import logging

M_TRIM_THRESHOLD = -1  # glibc <malloc.h>
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_MAX = 32 * 1024 * 1024  # glibc's cap on 64-bit (4 MiB * sizeof(long))
TUNED = {M_MMAP_THRESHOLD: MMAP_THRESHOLD_MAX, M_TRIM_THRESHOLD: 1 << 30}
GLIBC_DEFAULTS = {M_MMAP_THRESHOLD: 128 * 1024, M_TRIM_THRESHOLD: 128 * 1024}


@functools.lru_cache(maxsize=1)
def _mallopt():
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        fn = libc.mallopt
    except (OSError, AttributeError):
        logging.info("tfdist_opt: no glibc mallopt here; allocator left as is")
        return None
    fn.argtypes = (ctypes.c_int, ctypes.c_int)
    fn.restype = ctypes.c_int
    return fn


def _apply(settings: dict[int, int]) -> bool:
    fn = _mallopt()
    if fn is None:
        return False
    return all(fn(param, value) == 1 for param, value in settings.items())


def tune_for_collectives() -> bool:
    """Keeps freed buffers up to 32 MiB in the heap. True if applied."""
    return _apply(TUNED)


def restore_defaults() -> bool:
    """glibc's static defaults (the dynamic mmap threshold stays off)."""
    return _apply(GLIBC_DEFAULTS)
