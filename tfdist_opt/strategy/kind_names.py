"""`Kind`: the names of the strategy kinds, and nothing else.

A leaf module (it imports nothing from tfdist_opt), so that `StrategyConfig`
can validate `mode` against the kind names while the kind registry
(`tfdist_opt.strategy.kinds`, which takes a `StrategyConfig`) depends on the
config, not the other way round. `tfdist_opt.strategy.kinds` re-exports both
names; use them from there.
"""

from __future__ import annotations

import enum


class Kind(str, enum.Enum):
    """The strategy kinds `opt_strategy()` can build (`StrategyConfig.mode`)."""

    ONE_DEVICE = "one_device"
    MIRRORED = "mirrored"
    MULTI_WORKER = "multi_worker"
    PARAMETER_SERVER = "parameter_server"

    def __str__(self) -> str:  # "mirrored", not "Kind.MIRRORED", in messages
        return self.value


def names() -> tuple[str, ...]:
    """Every kind's name, in declaration order."""
    return tuple(k.value for k in Kind)
