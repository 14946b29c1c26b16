"""TF_CONFIG: build, validate, apply. Pure Python (no TensorFlow import).

(Minimal foundation version; the cluster issue extends validation.)
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping

TF_CONFIG_ENV = "TF_CONFIG"
ROLES = ("chief", "worker", "ps", "evaluator")


def parse_tf_config(text: str) -> dict[str, Any]:
    """Parses and validates TF_CONFIG JSON text."""
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(
            f"Invalid TF_CONFIG: malformed JSON ({e.msg} at line {e.lineno} "
            f"column {e.colno}, char {e.pos}). Received: TF_CONFIG={text!r}"
        ) from None
    validate_tf_config(cfg)
    return cfg


def validate_tf_config(cfg: Any) -> None:
    """Raises ValueError naming TF_CONFIG, the field and the value."""
    if not isinstance(cfg, dict):
        raise ValueError(
            "Invalid TF_CONFIG: expected a JSON object. "
            f"Received: {type(cfg).__name__}")
    cluster = cfg.get("cluster")
    if not isinstance(cluster, dict) or not cluster:
        raise ValueError(
            "Invalid TF_CONFIG: field `cluster` must be a non-empty object "
            f"mapping roles to address lists. Received: cluster={cluster!r}")
    task = cfg.get("task", {})
    task_type = task.get("type")
    if task_type not in cluster:
        raise ValueError(
            f"Invalid TF_CONFIG: field `task.type` must name a role present in "
            f"`cluster` ({', '.join(cluster)}). Received: task.type={task_type!r}")
    index = task.get("index")
    n = len(cluster[task_type])
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < n:
        raise ValueError(
            f"Invalid TF_CONFIG: field `task.index` must be an int in "
            f"[0, {n}) for role {task_type!r}. Received: task.index={index!r}")


def tf_config_from_env(environ: Mapping[str, str] | None = None
                       ) -> dict[str, Any] | None:
    """The validated TF_CONFIG of this process, or None when unset/empty."""
    environ = os.environ if environ is None else environ
    text = environ.get(TF_CONFIG_ENV, "").strip()
    if not text:
        return None
    return parse_tf_config(text)


def num_tasks(cfg: Mapping[str, Any]) -> int:
    """Tasks that take part in collectives (chief + workers)."""
    cluster = cfg.get("cluster", {})
    return len(cluster.get("chief", [])) + len(cluster.get("worker", []))


def build_tf_config(cluster: Mapping[str, list[str]], task_type: str,
                    task_index: int) -> dict[str, Any]:
    """Pure: the TF_CONFIG dict for one task."""
    cfg = {"cluster": {k: list(v) for k, v in cluster.items()},
           "task": {"type": task_type, "index": task_index}}
    validate_tf_config(cfg)
    return cfg


def apply_tf_config(cfg: Mapping[str, Any]) -> None:
    """The one place that writes TF_CONFIG into this process's environment."""
    validate_tf_config(cfg)
    os.environ[TF_CONFIG_ENV] = json.dumps(cfg)
