"""`to_yaml`: block-style YAML for the Kubernetes manifests, without PyYAML. Pure Python."""

from __future__ import annotations

import json
import re
from typing import Any

_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_./-]*$")


def to_yaml(obj: Any) -> str:
    """Block-style YAML for dicts, lists, str, int, bool, None.

    Strings are written double-quoted with JSON escapes (valid YAML), so no
    value can be misread as a number, a bool or YAML syntax.
    """
    return "".join(_emit(obj, 0)) or "{}\n"


def _scalar(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return json.dumps(v)
    raise TypeError(f"to_yaml: unsupported value type {type(v).__name__}: {v!r}")


def _key(k: Any) -> str:
    if not isinstance(k, str):
        raise TypeError(f"to_yaml: keys must be str. Received: {k!r}")
    return (
        k
        if _PLAIN_KEY.match(k) and k not in ("true", "false", "null", "yes", "no", "on", "off")
        else json.dumps(k)
    )


def _emit(obj: Any, indent: int):
    pad = " " * indent
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(v, (dict, list)) and v:
                yield f"{pad}{_key(k)}:\n"
                yield from _emit(v, indent + 2)
            else:
                yield f"{pad}{_key(k)}: {_empty(v) if isinstance(v, (dict, list)) else _scalar(v)}\n"
    elif isinstance(obj, list):
        for v in obj:
            if isinstance(v, (dict, list)) and v:
                lines = list(_emit(v, indent + 2))
                yield f"{pad}- {lines[0][indent + 2 :]}"
                yield from lines[1:]
            else:
                yield f"{pad}- {_empty(v) if isinstance(v, (dict, list)) else _scalar(v)}\n"
    else:
        yield f"{pad}{_scalar(obj)}\n"


def _empty(v) -> str:
    return "{}" if isinstance(v, dict) else "[]"
