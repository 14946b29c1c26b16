"""The stall inspector: a stuck worker of a multi-worker `fit` is named.

`policy` (pure decisions), `stacks` (a process's own Python stack, a peer's
state from /proc), `inspector` (publishing and the chief's verdict, over
the coordination service's key-value store) and `keras_binding` (the
progress callbacks `fit` installs, the input marker in the train step).
`StrategyConfig.stall_warn_s` / `stall_abort_s` configure it.
"""

from tfdist_opt.stall.inspector import STALL_EXIT_CODE

__all__ = ["STALL_EXIT_CODE"]
