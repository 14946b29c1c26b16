"""What `benchmarks/keras_compile.py` changes between its two settings.

Pure and flag-free, so tests import it without the binary's flags.
"""

from __future__ import annotations


def compile_kwargs(compare: str, which: int, spe: int) -> dict:
    """`compile` arguments of setting `which` (0 baseline, 1 candidate)."""
    if compare == "jit":
        return {"jit_compile": bool(which)}
    return {"steps_per_execution": spe if which else 1}


def steps_per_call(compare: str, which: int, spe: int) -> int:
    return spe if compare == "steps_per_execution" and which else 1
