"""Module-level `__getattr__` that imports TF-backed names on first use."""

from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping


def lazy_getattr(package: str, table: Mapping[str, str]) -> Callable[[str], Any]:
    """A PEP 562 `__getattr__` resolving `table[name]` (a module path) lazily."""

    def __getattr__(name: str) -> Any:
        if name in table:
            return getattr(importlib.import_module(table[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
