"""One cached subclass per (mixin, class): the per-instance class swap.

Used to bind behaviour to single objects (an optimizer, a model) without
patching their Keras class for the whole process: `obj.__class__ =
cached_subclass(Mixin, type(obj))`. The subclass keeps the original name,
module and qualname, so saving records the original class.
"""

from __future__ import annotations

import threading

_LOCK = threading.Lock()
_CLASSES: dict[tuple[type, type], type] = {}


def cached_subclass(mixin: type, cls: type) -> type:
    """`cls` itself if it already has `mixin`, else the cached `(mixin, cls)` subclass."""
    if issubclass(cls, mixin):
        return cls
    with _LOCK:
        sub = _CLASSES.get((mixin, cls))
        if sub is None:
            sub = type(
                cls.__name__,
                (mixin, cls),
                {
                    "__module__": cls.__module__,
                    "__qualname__": cls.__qualname__,
                    "__doc__": cls.__doc__,
                },
            )
            _CLASSES[(mixin, cls)] = sub
    return sub
