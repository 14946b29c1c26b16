"""Argument checks shared by every config and constructor (no TF import).

Each raises with one message shape (the Keras convention) — the argument, what
was expected, what was received:
``Invalid value for `num_packs`: expected a positive int. Received: num_packs=0``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterable, Mapping


def check_choice(name: str, value: Any, choices: Iterable[Any]) -> None:
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(
            f"Invalid value for `{name}`: expected one of "
            f"{', '.join(repr(c) for c in choices)}. Received: {name}={value!r}"
        )


def check_int(name: str, value: Any, minimum: int, expected: str | None = None) -> None:
    """An int (not a bool) >= minimum."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        expected = expected or ("a positive int" if minimum == 1 else f"an int >= {minimum}")
        raise ValueError(
            f"Invalid value for `{name}`: expected {expected}. Received: {name}={value!r}"
        )


def check_int_or(name: str, value: Any, word: str, minimum: int) -> None:
    """`word` (e.g. "autotune") or an int >= minimum."""
    if value != word:
        check_int(name, value, minimum, expected=f"{word!r} or an int >= {minimum}")


def check_number(
    name: str, value: Any, allow_zero: bool = False, expected: str | None = None
) -> None:
    """A finite number (not a bool), > 0 (or >= 0 with allow_zero)."""
    ok = (
        not isinstance(value, bool)
        and isinstance(value, (int, float))
        and math.isfinite(value)
        and (value >= 0 if allow_zero else value > 0)
    )
    if not ok:
        expected = expected or ("a non-negative number" if allow_zero else "a positive number")
        raise ValueError(
            f"Invalid value for `{name}`: expected {expected}. Received: {name}={value!r}"
        )


def check_bool(name: str, value: Any, error: type[Exception] = ValueError) -> None:
    """A bool; `error` is the exception type (TypeError for API arguments)."""
    if not isinstance(value, bool):
        raise error(f"Invalid value for `{name}`: expected a bool. Received: {name}={value!r}")


def check_known_keys(
    values: Mapping[str, Any], known: Iterable[str], typename: str, source: str
) -> None:
    """Refuses keys that are not fields of `typename`, listing the valid ones."""
    known = tuple(known)
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ValueError(
            f"Unknown {typename} field(s) in {source}: {', '.join(unknown)}. "
            f"Expected one of: {', '.join(known)}."
        )


class ConfigFields:
    """Mapping and copy methods for a frozen config dataclass.

    Shared by `StrategyConfig` and `PipelineOptions`: unknown keys are
    refused with the valid field names listed, and `replace` re-runs the
    dataclass's own validation.
    """

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def check_keys(cls, values: Mapping[str, Any], source: str) -> None:
        check_known_keys(values, cls.field_names(), cls.__name__, source)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any], source: str = "dict"):
        """Builds an instance from a mapping, refusing unknown keys."""
        if not isinstance(values, Mapping):
            raise TypeError(
                f"Invalid {source}: expected a mapping of {cls.__name__} "
                f"fields. Received: {type(values).__name__}"
            )
        cls.check_keys(values, source)
        return cls(**dict(values))

    def replace(self, **changes: Any):
        """Returns a copy with `changes` applied (validated)."""
        self.check_keys(changes, "keyword arguments")
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
