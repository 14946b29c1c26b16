"""Strategy kinds: one module each, keyed by `Kind`.

A kind is a module `tfdist_opt.strategy.kinds.<kind value>` with:

* `ROLES`: frozenset of TF_CONFIG task types it can run (empty: it runs
  without a cluster, or with a single-task TF_CONFIG);
* `AUTO_PRIORITY`: int or None. `mode="auto"` asks kinds in ascending
  priority and takes the first whose `auto_reason` answers (None: never
  chosen automatically);
* `auto_reason(config, topology) -> str | None`: why auto picks it here;
* `requested_reason(config, topology) -> str`: the reason for an explicit
  `mode=<kind>`, raising `ValueError` when this topology cannot run it;
* `plan(config, topology, reasons) -> StrategyPlan`: the pure decision;
* `build(config, plan, topology) -> tf.distribute.Strategy`: TF objects
  (imports TensorFlow inside the function).

Adding a kind is one module plus one `Kind` member (`kind_names`, a leaf
module so that `StrategyConfig` can name the kinds without importing this
registry). Pure Python: importing this package (or any kind module) does
not import TensorFlow.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING

from tfdist_opt.strategy.kind_names import Kind
from tfdist_opt.strategy.kind_names import names

if TYPE_CHECKING:  # pragma: no cover
    from tfdist_opt.strategy.config import StrategyConfig
    from tfdist_opt.strategy.topology import Topology


def module(kind: Kind | str) -> ModuleType:
    """The module implementing `kind`."""
    return importlib.import_module(f"{__name__}.{Kind(kind).value}")


def select(config: "StrategyConfig", topology: "Topology", reasons: list[str]) -> Kind:
    """The kind `config.mode` asks for on `topology`, with the reason appended.

    The side-car `evaluator` task (TF's rule: not part of the training
    cluster) gets `one_device` whatever `mode` says, so one script with one
    config serves every task; training tasks ignore it.

    Raises:
        ValueError: the requested kind cannot run here, TF_CONFIG names a
            task type the kind does not handle, or (auto) no kind fits.
    """
    if topology.is_evaluator:
        reasons.append(
            f"evaluator task: side-car evaluation outside the training cluster "
            f"runs on one device (mode={config.mode} applies to the training "
            "tasks)"
        )
        return Kind.ONE_DEVICE
    if config.mode != "auto":
        kind = Kind(config.mode)
        reasons.append(module(kind).requested_reason(config, topology))
    else:
        kind = _auto(config, topology, reasons)
    _check_roles(kind, topology)
    return kind


def _auto(config, topology, reasons) -> Kind:
    ranked = sorted(
        (m.AUTO_PRIORITY, k) for k in Kind if (m := module(k)).AUTO_PRIORITY is not None
    )
    for _, kind in ranked:
        reason = module(kind).auto_reason(config, topology)
        if reason is not None:
            reasons.append(reason)
            return kind
    roles = sorted(_cluster_roles(topology))
    raise ValueError(
        "Invalid TF_CONFIG for mode='auto': no strategy kind runs a cluster "
        f"with task types {roles}. Received: cluster roles {roles}. Expected "
        "the roles of one of: "
        + "; ".join(
            f"{k.value} ({', '.join(sorted(module(k).ROLES)) or 'no cluster'})" for k in Kind
        )
    )


def _cluster_roles(topology) -> set[str]:
    """Task types of the training cluster (the evaluator is not part of it)."""
    if topology.tf_config is None:
        return set()
    return {r for r, tasks in topology.tf_config["cluster"].items() if tasks and r != "evaluator"}


def _check_roles(kind: Kind, topology) -> None:
    roles = module(kind).ROLES
    if not roles or topology.tf_config is None:
        return
    extra = sorted(_cluster_roles(topology) - roles)
    if extra:
        raise ValueError(
            f"Invalid TF_CONFIG for a {kind.value} strategy: task type(s) "
            f"{', '.join(repr(r) for r in extra)} cannot take part. Received: "
            f"cluster roles {sorted(_cluster_roles(topology))}. Expected only "
            f"{', '.join(sorted(roles))} (remove the other tasks, or choose "
            "the kind that runs them with `mode`)."
        )
