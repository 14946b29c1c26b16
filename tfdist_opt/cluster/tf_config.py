"""TF_CONFIG: build, validate, apply. Pure Python (no TensorFlow import).

TensorFlow reads `TF_CONFIG` when a multi-worker strategy is created and
reports mistakes late and badly: a bare `JSONDecodeError`, a silent
single-worker run, or a one-hour wait for a peer that will never come
(tensorflow/tensorflow#39922, #41257, #46931, #57372). Everything here checks
the JSON before TensorFlow starts and names TF_CONFIG, the field and the
value in every error.

Build, then apply: `build_tf_config()` is pure and
`apply_tf_config()` is the one function that writes the environment.
"""

from __future__ import annotations

import ipaddress
import json
import os
import warnings
from typing import Any, Iterable, Mapping

TF_CONFIG_ENV = "TF_CONFIG"
ROLES = ("chief", "worker", "ps", "evaluator")
# Roles with at most one task (TF rejects more).
_SINGLETON_ROLES = ("chief", "evaluator")
_TOP_LEVEL_KEYS = ("cluster", "task", "rpc_layer", "environment")
_WILDCARD_HOSTS = ("0.0.0.0", "::", "*", "[::]")
_SECURITY_NOTE = (
    "TensorFlow's gRPC server listens on every interface without "
    "authentication (TF SECURITY.md: 'meant for internal communication "
    "only'); keep the cluster on a private network"
)


class TFConfigError(ValueError):
    """A TF_CONFIG that TensorFlow would misread, reject late, or hang on."""


def _source_label(source: str | None) -> str:
    return "TF_CONFIG" if not source else f"TF_CONFIG (from {source})"


# ------------------------------------------------------------ parsing
def parse_tf_config(text: str, source: str | None = None) -> dict[str, Any]:
    """Parses and validates TF_CONFIG JSON text.

    Args:
        text: str. The JSON text.
        source: str or None. Where it came from (a file path, "environment"),
            quoted in errors. Defaults to `None`.

    Returns:
        The TF_CONFIG as a dict.

    Raises:
        TFConfigError: (a ValueError) malformed JSON, with its position, or
            any problem `validate_tf_config` finds.

    Example:
        >>> parse_tf_config('{"cluster": {"worker": ["h1:2222"]}, '
        ...                 '"task": {"type": "worker", "index": 0}}')["task"]
        {'type': 'worker', 'index': 0}
    """
    if not isinstance(text, str):
        raise TypeError(
            f"Invalid {_source_label(source)}: expected JSON text "
            f"(str). Received: {type(text).__name__}"
        )
    try:
        cfg = json.loads(text)
    except json.JSONDecodeError as e:
        raise TFConfigError(
            f"Invalid {_source_label(source)}: malformed JSON ({e.msg} at line "
            f"{e.lineno} column {e.colno}, char {e.pos}: "
            f"{_excerpt(text, e.pos)}). Received: TF_CONFIG={_clip(text)}"
        ) from None
    validate_tf_config(cfg, source=source)
    return cfg


def tf_config_from_env(environ: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """The validated TF_CONFIG of this process, or None when unset/empty."""
    environ = os.environ if environ is None else environ
    text = environ.get(TF_CONFIG_ENV, "").strip()
    if not text:
        return None
    return parse_tf_config(text, source="environment")


def tf_config_from_file(path: str | os.PathLike) -> dict[str, Any]:
    """Reads and validates a TF_CONFIG JSON file."""
    with open(path, encoding="utf-8") as f:
        return parse_tf_config(f.read(), source=f"file {os.fspath(path)}")


# ------------------------------------------------------------ validation
def validate_tf_config(cfg: Any, source: str | None = None, warn: bool = True) -> list[str]:
    """Checks a TF_CONFIG dict as TensorFlow would use it, before TF starts.

    Errors name TF_CONFIG, the field and the value: missing `cluster` or
    `task`, unknown roles, empty or non-list address lists, addresses
    without a valid port, duplicate addresses, more than one chief or
    evaluator, `localhost` mixed with remote hosts, and a task type or
    index that does not point into the cluster.

    Args:
        cfg: dict. A parsed TF_CONFIG.
        source: str or None. Where it came from, quoted in errors.
        warn: bool. Also emit the returned warnings with `warnings.warn`.
            Defaults to `True`.

    Returns:
        list of str: warnings (wildcard or public addresses: TF's gRPC
        server is unauthenticated).

    Raises:
        TFConfigError: (a ValueError) the first problem found.
    """
    label = _source_label(source)

    def fail(field: str, expected: str, received: Any) -> None:
        raise TFConfigError(
            f"Invalid {label}: field `{field}` {expected}. Received: {field}={received!r}"
        )

    if not isinstance(cfg, dict):
        raise TFConfigError(
            f"Invalid {label}: expected a JSON object with `cluster` and "
            f"`task`. Received: {type(cfg).__name__} {_clip(cfg)}"
        )
    unknown = sorted(set(cfg) - set(_TOP_LEVEL_KEYS))
    if unknown:
        raise TFConfigError(
            f"Invalid {label}: unknown top-level field(s) {', '.join(unknown)}. "
            f"Expected only: {', '.join(_TOP_LEVEL_KEYS)}. "
            f"Received: keys={sorted(cfg)}"
        )
    if "cluster" not in cfg:
        fail(
            "cluster",
            "is missing: a multi-worker TF_CONFIG needs `cluster` mapping "
            "roles to address lists (unset TF_CONFIG for a single-worker run)",
            None,
        )
    cluster = cfg["cluster"]
    if not isinstance(cluster, dict) or not cluster:
        fail(
            "cluster",
            f"must be a non-empty object mapping roles ({', '.join(ROLES)}) to address lists",
            cluster,
        )
    for role, addresses in cluster.items():
        if role not in ROLES:
            fail(
                f"cluster.{role}",
                f"names an unknown task type; expected one of {', '.join(ROLES)}",
                addresses,
            )
        if (
            not isinstance(addresses, list)
            or not addresses
            or not all(isinstance(a, str) for a in addresses)
        ):
            fail(f"cluster.{role}", 'must be a non-empty list of "host:port" strings', addresses)
        for i, address in enumerate(addresses):
            _check_address(f"cluster.{role}[{i}]", address, fail)
    for role in _SINGLETON_ROLES:
        if len(cluster.get(role, [])) > 1:
            fail(
                f"cluster.{role}",
                f"must list at most one address (a job has one {role})",
                cluster[role],
            )
    _check_duplicates(cluster, label)
    _check_local_mix(cluster, label)

    if "task" not in cfg:
        fail("task", 'is missing: each process needs its own {"type": ROLE, "index": I}', None)
    task = cfg["task"]
    if not isinstance(task, dict):
        fail("task", 'must be an object {"type": ROLE, "index": I}', task)
    task_type = task.get("type")
    if task_type not in ROLES:
        fail("task.type", f"must be one of {', '.join(ROLES)}", task_type)
    if task_type not in cluster:
        fail(
            "task.type", f"must name a role present in `cluster` ({', '.join(cluster)})", task_type
        )
    index = task.get("index")
    n = len(cluster[task_type])
    if isinstance(index, bool) or not isinstance(index, int):
        fail("task.index", f"must be an int in [0, {n}) for role {task_type!r}", index)
    if not 0 <= index < n:
        fail("task.index", f"must be in [0, {n}): cluster.{task_type} has {n} address(es)", index)

    found = tf_config_warnings(cfg)
    if warn:
        for message in found:
            warnings.warn(f"{label}: {message}", stacklevel=2)
    return found


def tf_config_warnings(cfg: Mapping[str, Any]) -> list[str]:
    """Soft problems of a valid TF_CONFIG: wildcard or public addresses."""
    out = []
    cluster = cfg.get("cluster", {})
    for role, addresses in cluster.items():
        for i, address in enumerate(addresses):
            host, _ = split_address(address)
            if host in _WILDCARD_HOSTS:
                out.append(
                    f"cluster.{role}[{i}]={address!r} is a wildcard address; "
                    f"peers cannot connect to it. {_SECURITY_NOTE}."
                )
            elif is_public_host(host):
                out.append(
                    f"cluster.{role}[{i}]={address!r} is a public address. {_SECURITY_NOTE}."
                )
    if "ps" in cluster and "chief" not in cluster:
        out.append(
            "cluster has `ps` tasks but no `chief`: "
            "ParameterServerStrategy needs a chief (the coordinator)."
        )
    return out


def num_tasks(cfg: Mapping[str, Any]) -> int:
    """Tasks that take part in collectives (chief + workers)."""
    cluster = cfg.get("cluster", {})
    return len(cluster.get("chief", [])) + len(cluster.get("worker", []))


def training_cluster(cfg: Mapping[str, Any]) -> dict[str, list[str]]:
    """The cluster without the `evaluator`: TF's rule is that the side-car
    evaluator is not part of the training cluster."""
    return {r: list(v) for r, v in cfg.get("cluster", {}).items() if r != "evaluator"}


# ------------------------------------------------------------ build / apply
def build_tf_config(
    cluster: Mapping[str, Iterable[str]], task_type: str, task_index: int
) -> dict[str, Any]:
    """Pure: the validated TF_CONFIG dict for one task.

    Args:
        cluster: mapping of role (`chief`, `worker`, `ps`, `evaluator`) to a
            list of "host:port" addresses.
        task_type: str. This task's role.
        task_index: int. This task's index within its role.

    Returns:
        `{"cluster": {...}, "task": {"type": ..., "index": ...}}`, roles in
        the order chief, worker, ps, evaluator.

    Raises:
        TFConfigError: (a ValueError) anything `validate_tf_config` rejects.

    Example:
        >>> cfg = build_tf_config({"worker": ["h1:2222", "h2:2222"]}, "worker", 1)
        >>> cfg["task"]
        {'type': 'worker', 'index': 1}
    """
    ordered = {r: list(cluster[r]) for r in ROLES if r in cluster}
    ordered.update({r: list(v) for r, v in cluster.items() if r not in ordered})
    cfg = {"cluster": ordered, "task": {"type": task_type, "index": task_index}}
    validate_tf_config(cfg, warn=False)
    return cfg


def all_tasks(cluster: Mapping[str, Iterable[str]]) -> list[tuple[str, int]]:
    """Every (task_type, index) of a cluster, chief first."""
    return [(role, i) for role in ROLES for i in range(len(list(cluster.get(role, []))))]


def build_all_tf_configs(cluster: Mapping[str, Iterable[str]]) -> list[dict[str, Any]]:
    """Pure: one TF_CONFIG per task, chief first (see `all_tasks`)."""
    cluster = {r: list(v) for r, v in cluster.items()}
    return [build_tf_config(cluster, r, i) for r, i in all_tasks(cluster)]


def dumps_tf_config(cfg: Mapping[str, Any]) -> str:
    """Compact one-line JSON, as TF_CONFIG is usually set."""
    return json.dumps(cfg, separators=(",", ":"))


def apply_tf_config(cfg: Mapping[str, Any] | None, environ: dict[str, str] | None = None) -> None:
    """The one place that writes TF_CONFIG into an environment.

    Args:
        cfg: dict or None. A TF_CONFIG (validated here); None removes
            TF_CONFIG (single-worker run).
        environ: dict or None. Environment to write (a child process's env
            dict). Defaults to `os.environ`.
    """
    environ = os.environ if environ is None else environ
    if cfg is None:
        environ.pop(TF_CONFIG_ENV, None)
        return
    validate_tf_config(dict(cfg))
    environ[TF_CONFIG_ENV] = dumps_tf_config(cfg)


# ------------------------------------------------------------ addresses
def split_address(address: str) -> tuple[str, str | None]:
    """'host:port' -> ('host', 'port'); '[::1]:22' -> ('::1', '22'); no port: None."""
    if address.startswith("["):
        host, sep, rest = address[1:].partition("]")
        if not sep:
            return address, None
        return host, rest[1:] if rest.startswith(":") else None
    if address.count(":") > 1:  # bare IPv6 without brackets: no port
        return address, None
    host, sep, port = address.rpartition(":")
    if not sep:
        return address, None
    return host, port


def parse_port(text: str | None) -> int | None:
    """The port as int if `text` is a decimal in 1..65535, else None."""
    if text is None or not text.isdigit():
        return None
    port = int(text)
    return port if 1 <= port <= 65535 else None


def is_loopback_host(host: str) -> bool:
    if host.lower() in ("localhost", "localhost.localdomain", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_public_host(host: str) -> bool:
    """True for a literal IP that is globally routable (hostnames: unknown, False)."""
    try:
        return ipaddress.ip_address(host).is_global
    except ValueError:
        return False


def _check_address(field: str, address: str, fail) -> None:
    host, port_text = split_address(address)
    if not host:
        fail(field, 'must be "host:port" with a host name or IP', address)
    if port_text is None or port_text == "":
        fail(field, 'is missing a port: expected "host:port"', address)
    if parse_port(port_text) is None:
        fail(field, f"has an invalid port {port_text!r}: expected an int in 1..65535", address)


def _check_duplicates(cluster: Mapping[str, list[str]], label: str) -> None:
    seen: dict[tuple[str, int], str] = {}
    for role, addresses in cluster.items():
        for i, address in enumerate(addresses):
            host, port = split_address(address)
            key = ("localhost" if is_loopback_host(host) else host.lower(), int(port))
            where = f"cluster.{role}[{i}]"
            if key in seen:
                raise TFConfigError(
                    f"Invalid {label}: field `{where}` duplicates "
                    f"`{seen[key]}`: two tasks cannot share one address. "
                    f"Received: {where}={address!r}"
                )
            seen[key] = where


def _check_local_mix(cluster: Mapping[str, list[str]], label: str) -> None:
    local, remote = None, None
    for role, addresses in cluster.items():
        for i, address in enumerate(addresses):
            host, _ = split_address(address)
            if host in _WILDCARD_HOSTS:
                continue
            if is_loopback_host(host):
                local = local or (f"cluster.{role}[{i}]", address)
            else:
                remote = remote or (f"cluster.{role}[{i}]", address)
    if local and remote:
        raise TFConfigError(
            f"Invalid {label}: field `{local[0]}` is a loopback address but "
            f"`{remote[0]}` is remote: the remote task would dial its own "
            f"loopback. Use the host's reachable name or IP. "
            f"Received: {local[0]}={local[1]!r}, {remote[0]}={remote[1]!r}"
        )


def _clip(value: Any, limit: int = 300) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "...'"


def _excerpt(text: str, pos: int, width: int = 20) -> str:
    start = max(0, pos - width)
    return f"near {text[start:pos]!r} <here> {text[pos : pos + width]!r}"
