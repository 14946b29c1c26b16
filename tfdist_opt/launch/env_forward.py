"""Which of the launcher's variables every task gets, on every node.

Local tasks inherit the launcher's whole environment. Tasks elsewhere (Ray
workers on other nodes) do not, so a configuration set by environment
(`TFDIST_OPT_COMPRESSION=bf16`, `TF_CPP_MIN_LOG_LEVEL=2`) would be dropped
silently there. The rule, the same for every backend:

- the launcher's `TFDIST_OPT_*` and `TF_*` variables are forwarded, except
  `TF_CONFIG` (each task gets its own);
- `--env NAME=VALUE` (repeatable) sets NAME in every task; `--env NAME`
  forwards the launcher's own value of NAME (an error if it is unset).

The start line names what was forwarded. Pure Python.
"""

from __future__ import annotations

import re
from typing import Mapping, Sequence

PREFIXES = ("TFDIST_OPT_", "TF_")
NEVER = frozenset({"TF_CONFIG"})  # per task, built by the backend
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse_env_flags(items: Sequence[str], environ: Mapping[str, str]) -> dict[str, str]:
    """`--env NAME=VALUE` / `--env NAME` items as {NAME: VALUE}.

    Raises:
        ValueError: a malformed name, `TF_CONFIG`, or NAME without a value
            that the launcher's environment does not set.
    """
    out: dict[str, str] = {}
    for item in items:
        name, has_value, value = item.partition("=")
        if not _NAME.fullmatch(name):
            raise ValueError(
                "Invalid value for `--env`: expected NAME=VALUE or "
                "NAME (a variable name: letters, digits, _). "
                f"Received: --env {item!r}"
            )
        if name in NEVER:
            raise ValueError(
                "Invalid value for `--env`: TF_CONFIG is built for "
                f"each task by the launcher. Received: --env {item!r}"
            )
        if not has_value:
            if name not in environ:
                raise ValueError(
                    f"Invalid value for `--env`: {name} is not set in the "
                    f"launcher's environment. Received: --env {name}. Expected "
                    f"--env {name}=VALUE, or {name} set where you run launch."
                )
            value = environ[name]
        out[name] = value
    return out


def forwarded(environ: Mapping[str, str], flags: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables every task gets: `TFDIST_OPT_*`, `TF_*`, then `--env`."""
    out = {k: v for k, v in sorted(environ.items()) if k.startswith(PREFIXES) and k not in NEVER}
    out.update(flags or {})
    return out


def describe(env: Mapping[str, str]) -> str:
    """ "forwarding A, B" for the start line ("" when nothing is)."""
    return f"forwarding {', '.join(sorted(env))}" if env else ""
