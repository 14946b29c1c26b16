"""`chain(*stages)` (module `combine`): composes gradient stages and checks their combination.

Pure Python (no TensorFlow import). A `Chain` is the whole gradient path
of a hooked optimizer, in `stage.POSITIONS` order:

    accumulate -> local -> wire -> pack -> collective -> after -> update

The rules, checked by `chain` with an error naming both stages and why:

* every element is a `GradientStage` whose `position` is one of
  `POSITIONS` (a user stage: `"local"`, `"collective"` or `"after"`);
* stages come in position order;
* at most one stage at each of `UNIQUE_POSITIONS` (one collective, one
  wire dtype, one packing, one accumulation, one update);
* no pair of stages conflicts (`GradientStage.conflicts`, asked both
  ways; e.g. `ZeRO` with `PowerSGD` or `Accumulate`, `Accumulate` with a
  user stage).

Without a collective stage the chain ends its collective part with the
plain `AllReduce`. `from_options(options)` is the chain the
`GradientOptions` strings stand for, with the user's `options.stages`
placed by position; `Chain.options(base)` is the inverse view: the
options fields the built-in stages set, which the TensorFlow code of the
built-ins reads.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable

from tfdist_opt.gradients.stages import builtin_stages as bs
from tfdist_opt.gradients.stages.stage import POSITIONS
from tfdist_opt.gradients.stages.stage import UNIQUE_POSITIONS
from tfdist_opt.gradients.stages.stage import USER_POSITIONS
from tfdist_opt.gradients.stages.stage import GradientStage

_COLLECTIVE = POSITIONS.index("collective")


@dataclasses.dataclass(frozen=True)
class Chain:
    """A checked sequence of stages (make one with `chain`).

    Attributes:
        stages: tuple of `GradientStage`, in position order, the collective
            included (`AllReduce` when none was given).
    """

    stages: tuple

    def at(self, position: str) -> list:
        """The stages at `position`, in order."""
        return [s for s in self.stages if s.position == position]

    def first(self, cls: type):
        """The first stage of class `cls`, or None."""
        return next((s for s in self.stages if isinstance(s, cls)), None)

    @property
    def collective(self) -> GradientStage:
        return self.at("collective")[0]

    @property
    def user_stages(self) -> list:
        """The stages not built into tfdist_opt."""
        return [s for s in self.stages if not isinstance(s, bs.BuiltinStage)]

    def options(self, base: Any) -> Any:
        """`base` (a `GradientOptions`) with the built-in stages' fields."""
        fields: dict = {}
        psgd = self.first(bs.PowerSGD)
        for s in self.stages:
            if isinstance(s, bs.BuiltinStage):
                fields.update(s.option_fields())
        cast = self.first(bs.Cast)
        if psgd is not None:
            fields["compression"] = "powersgd"
            fields["powersgd_wire"] = cast.dtype if cast is not None else "none"
        if "compression" not in fields:
            fields["compression"] = "none"
        fields.setdefault("grad_accum", 1)
        fields.setdefault("bytes_per_pack", 0)
        fields.setdefault("shard_optimizer_state", False)
        fields["stages"] = tuple(self.user_stages)
        return dataclasses.replace(base, **fields)

    def describe(self) -> str:
        """One line: the stages in order."""
        return " -> ".join(s.describe() for s in self.stages)


def chain(*stages: GradientStage) -> Chain:
    """Composes `stages` into one gradient path, checking the rules.

    Args:
        *stages: `GradientStage` instances, in position order (see the
            module doc). A chain without a `"collective"` stage gets the
            plain `AllReduce`.

    Returns:
        A `Chain`.

    Raises:
        TypeError: an element is not a `GradientStage`.
        ValueError: a rule of the module doc is broken; the message names
            the stages (and the settings they came from) and the rule.

    Example:
        >>> from tfdist_opt.gradients.stages.builtin_stages import Cast, Pack
        >>> chain(Cast("bf16"), Pack(4 << 20)).describe()
        'Cast (wire, lossy) -> Pack (pack) -> AllReduce (collective)'
    """
    stages = list(stages)
    for i, s in enumerate(stages):
        if not isinstance(s, GradientStage):
            raise TypeError(
                "Invalid value for `stages`: expected GradientStage instances "
                f"(tfdist_opt.gradients.GradientStage). Received: stages[{i}]={s!r} "
                f"of type {type(s).__name__}"
            )
        allowed = POSITIONS if isinstance(s, bs.BuiltinStage) else USER_POSITIONS
        if s.position not in allowed:
            raise ValueError(
                f"Invalid value for `{s.name}.position`: expected one of "
                f"{', '.join(map(repr, allowed))}. Received: position={s.position!r}"
            )
    for a, b in zip(stages, stages[1:]):
        if POSITIONS.index(a.position) > POSITIONS.index(b.position):
            raise ValueError(
                f"Invalid order of gradient stages: {_named(a)} comes before "
                f"{_named(b)}. Expected the order {' -> '.join(POSITIONS)}. "
                f"Received: stages={stages!r}"
            )
    for position in UNIQUE_POSITIONS:
        here = [s for s in stages if s.position == position]
        if len(here) > 1:
            raise ValueError(
                f"Invalid combination of gradient stages: {_named(here[0])} and "
                f"{_named(here[1])} are both at position {position!r}; a chain "
                f"has at most one. Received: stages={stages!r}"
            )
    for i, a in enumerate(stages):
        for b in stages[i + 1 :]:
            for x, y in ((a, b), (b, a)):
                reason = x.conflicts(y)
                if reason:
                    raise ValueError(_conflict_message(x, y, reason, stages))
    if not any(s.position == "collective" for s in stages):
        cut = next(
            (i for i, s in enumerate(stages) if POSITIONS.index(s.position) > _COLLECTIVE),
            len(stages),
        )
        stages.insert(cut, bs.AllReduce())
    return Chain(tuple(stages))


def from_options(options: Any) -> Chain:
    """The chain a `GradientOptions` stands for (its strings + `stages`).

    Built-in stages made from the strings carry their setting as `source`,
    so a conflict names the field; the user's `options.stages` are placed
    by position (stable: their own order is kept within a position).
    """
    made = list(_from_fields(options))
    return chain(*_by_position(made + list(getattr(options, "stages", ()) or ())))


def _from_fields(o: Any) -> Iterable[GradientStage]:
    if o.grad_accum != 1:
        yield bs.Accumulate(o.grad_accum, source=f"grad_accum={o.grad_accum!r}")
    compression = o.compression
    if compression in bs.WIRES:
        yield bs.Cast(compression, source=f"compression={compression!r}")
    bpp = getattr(o, "bytes_per_pack", 0)
    if bpp != 0:
        yield bs.Pack(bpp, source=f"bytes_per_pack={bpp!r}")
    if compression == "powersgd":
        wire = getattr(o, "powersgd_wire", "none")
        if wire != "none":
            yield bs.Cast(wire, source=f"powersgd_wire={wire!r}")
        yield bs.PowerSGD(
            getattr(o, "powersgd_rank", bs.powersgd.DEFAULT_RANK),
            getattr(o, "powersgd_start_step", bs.powersgd.DEFAULT_START_STEP),
            getattr(o, "powersgd_min_compression", bs.powersgd.DEFAULT_MIN_COMPRESSION),
            getattr(o, "powersgd_seed", 0),
            source="compression='powersgd'",
        )
    if o.shard_optimizer_state:
        yield bs.ZeRO(
            getattr(o, "shard_bucket_bytes", bs.ZERO_BUCKET_BYTES),
            source="shard_optimizer_state=True",
        )


def _by_position(stages: list) -> list:
    def key(s):
        return POSITIONS.index(s.position) if s.position in POSITIONS else -1

    return sorted(stages, key=key)


def _named(s: GradientStage) -> str:
    source = getattr(s, "source", None)
    return f"{s.name} (from {source})" if source else s.name


def _conflict_message(x, y, reason: str, stages: list) -> str:
    # Name the setting a built-in stage came from (y's first, as asked),
    # and the other stage as the thing to leave out.
    setting, other = (y, x) if getattr(y, "source", None) else (x, y)
    source = getattr(setting, "source", None)
    if source:
        field = source.split("=", 1)[0]
        what = getattr(other, "source", None) or f"the {other.name} stage"
        return (
            f"Invalid value for `{field}` with {what}: {reason}. "
            f"Received: {source}. Expected another value, or no {other.name} stage."
        )
    return (
        f"Invalid combination of gradient stages: {_named(x)} and {_named(y)}: "
        f"{reason}. Received: stages={stages!r}. Expected a chain without one of them."
    )
