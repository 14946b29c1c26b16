"""`GradientStage`: one step of the gradient path, the interface users write.

Pure Python (no TensorFlow import). A stage is Optax's
`GradientTransformation` (`init` makes state, `update` maps gradients)
crossed with a PyTorch DDP communication hook (`hook(state, bucket)`
returns the reduced bucket): it has state, created once and checkpointed,
and one method that maps a bucket of gradients to a bucket of gradients,
which may run collectives through its context.

`chain(*stages)` (`tfdist_opt.gradients.stages.combine`) composes stages and checks
the combination rules the stages declare; the strings of
`StrategyConfig` (`compression`, `grad_accum`, `bytes_per_pack`,
`shard_optimizer_state`) build a chain of the built-in stages
(`tfdist_opt.gradients.stages.builtin_stages`), and a hooked optimizer runs that
chain and nothing else.

Where a stage runs is its `position`, one of `POSITIONS`, in this order:

* `"accumulate"`: across micro-steps (`Accumulate`), before anything else;
* `"local"`: on each replica's own gradients, before any collective
  (a user stage: sparsification, clipping of the local gradient, ...);
* `"wire"`: the dtype every collective of the step travels in (`Cast`);
* `"pack"`: how the tensors of one collective are grouped (`Pack`);
* `"collective"`: the all-reduce itself: exactly one per chain, the
  plain `AllReduce` unless a stage replaces it (`PowerSGD`, a user stage);
* `"after"`: on the summed gradients, after the collective;
* `"update"`: how the optimizer applies them (`ZeRO`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

POSITIONS = ("accumulate", "local", "wire", "pack", "collective", "after", "update")
# At most one stage at each of these positions in a chain.
UNIQUE_POSITIONS = ("accumulate", "wire", "pack", "collective", "update")
# Where a stage written outside tfdist_opt may run.
USER_POSITIONS = ("local", "collective", "after")


@dataclasses.dataclass(frozen=True)
class Bucket:
    """The gradients one `reduce` call gets, with their variables.

    One pack of a step's dense gradients (the chain's `Pack` decides the
    packs; `bytes_per_pack=0`: the whole step).

    Attributes:
        gradients: list of dense tensors, one per variable (None where a
            variable has no gradient: pass it through).
        variables: list of the matching model variables (Keras variables;
            the key to a stage's per-variable state).
    """

    gradients: list
    variables: list

    def replace(self, gradients: Sequence) -> "Bucket":
        """The same variables with new gradients."""
        gradients = list(gradients)
        if len(gradients) != len(self.variables):
            raise ValueError(
                "Invalid value for `gradients`: expected one per variable "
                f"({len(self.variables)}). Received: {len(gradients)} gradients"
            )
        return Bucket(gradients, list(self.variables))


class GradientStage:
    """Base class of a gradient stage; subclass it and override `reduce`.

    A stage is a plain Python object holding its settings; its state lives
    in optimizer variables made by `init`, so `tf.train.Checkpoint`,
    `model.save` and `DistributedBackupAndRestore` carry it with the
    optimizer's other variables.

    Class attributes (the combination rules read them):
        position: str. Where the stage runs, one of `POSITIONS` (a user
            stage: `"local"`, `"collective"` or `"after"`). Defaults to
            `"local"`.
        lossy: bool. Whether the summed result differs from the exact
            sum of the replicas' gradients (documentation and `describe`).
            Defaults to `False`.

    Methods to override:
        init(variables, context) -> state: called once, when the optimizer
            is built (in its `build`), under the strategy's scope. Make
            state with `context.add_state(...)`; return anything (a list of
            variables, a dict, None). Defaults to None.
        reduce(bucket, state, context) -> Bucket: called on every
            optimizer step once per bucket (one pack of the step's
            gradients, grouped by the chain's `Pack`; key per-variable
            state by `variable.path`), in the replica context, inside the step's
            `tf.function`: TensorFlow code on this replica's tensors. A
            `"local"` stage transforms this replica's gradients; a
            `"collective"` stage returns their SUM over replicas, e.g.
            `context.all_reduce_sum(tensors)`; an `"after"` stage sees the
            sums. Keep the shapes and dtypes.
        conflicts(other) -> str or None: why this stage cannot be in one
            chain with `other` (None: it can). `chain` asks both ways.

    Example:
        >>> class Scale(GradientStage):
        ...     position = "after"
        ...     def __init__(self, factor):
        ...         self.factor = factor
        ...     def reduce(self, bucket, state, context):
        ...         return bucket.replace(
        ...             [None if g is None else g * self.factor for g in bucket.gradients]
        ...         )
        >>> Scale(0.5).describe()
        'Scale (after)'
    """

    position: str = "local"
    lossy: bool = False

    def init(self, variables: Sequence, context) -> Any:
        """Creates the stage's state (see the class doc)."""
        del variables, context
        return None

    def reduce(self, bucket: Bucket, state: Any, context) -> Bucket:
        """Maps one bucket of gradients (see the class doc)."""
        del state, context
        return bucket

    def conflicts(self, other: "GradientStage") -> str | None:
        """Why this stage and `other` cannot share a chain, or None."""
        del other
        return None

    @property
    def name(self) -> str:
        """The stage's name in messages: its class name."""
        return type(self).__name__

    def describe(self) -> str:
        """One line for logs and error messages."""
        return f"{self.name} ({self.position}{', lossy' if self.lossy else ''})"

    def __repr__(self) -> str:
        return self.describe()
