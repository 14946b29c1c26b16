"""One cached subclass per (mixin, class): the per-instance class swap.

Used to bind behaviour to single objects (an optimizer, a model) without
patching their Keras class for the whole process: `obj.__class__ =
cached_subclass(Mixin, type(obj))`. The subclass keeps the original name,
module and qualname, so saving records the original class.

A class registered for Keras serialization
(`keras.saving.register_keras_serializable`, e.g. as `my_package>MyModel`)
is found again by that name when a saved model is loaded; Keras writes the
name `keras.saving.get_registered_name(type(obj))` returns, which for an
unregistered subclass is its bare `__name__` (`MyModel`), a name no loader
can locate. So the subclass is registered under the original's name too,
and the name still loads the original class (never the subclass, whose
mixin needs the per-instance set-up of the strategy that swapped it).
"""

from __future__ import annotations

import sys
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
        _register_like(sub, cls)
    return sub


def _register_like(sub: type, cls: type) -> None:
    """Gives `sub` the Keras-registered name of `cls`, which still loads `cls`.

    Checked at every swap, not once per subclass: a class may be registered
    after its first instance was swapped. Only through Keras's public
    registry (`get_registered_name`, `register_keras_serializable`,
    `get_custom_objects`).
    """
    keras = sys.modules.get("keras")
    saving = getattr(keras, "saving", None)
    if saving is None:
        return
    name = saving.get_registered_name(cls)
    if not isinstance(name, str) or name == cls.__name__:
        return
    if saving.get_registered_name(sub) == name:
        return
    package, _, short = name.rpartition(">")
    if not package:
        return
    objects = saving.get_custom_objects()
    # What the name loads now: the user's class, also when `cls` is itself
    # a swapped subclass (a second mixin).
    loads = objects.get(name, cls)
    saving.register_keras_serializable(package=package, name=short)(sub)
    objects[name] = loads
