"""What every Kubernetes manifest kind shares: field checks and pod pieces. Pure Python.

The builders of `tfdist-opt k8s` (`tfdist_opt.cluster.k8s` for TFJob,
`trainjob`, `kuberay`) check their fields here (`check_pod_fields`: image,
command, GPUs, port, restarts, env, backup volume) and build the container
(image, command, env, `nvidia.com/gpu` limit) and the backup volume
(`backup_volumes`): a PersistentVolumeClaim when a claim is named, else an
`emptyDir`, which outlives a container restart in the same pod but not the
pod.
"""

from __future__ import annotations

import re
import warnings
from typing import Any, Mapping, Sequence

GPU_RESOURCE = "nvidia.com/gpu"
BACKUP_VOLUME = "tfdist-opt-backup"
_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# ------------------------------------------------------------ field checks
def check_label(field: str, value: Any, reserve: int = 0) -> None:
    """Raises unless `value` is a DNS label with `reserve` characters to spare."""
    if not isinstance(value, str) or not _DNS_LABEL.match(value) or len(value) + reserve > 63:
        raise ValueError(
            f"Invalid value for `{field}`: expected a DNS label (lower-case "
            f"letters, digits, '-', starting with a letter, at most "
            f"{63 - reserve} characters so pod names fit). Received: "
            f"{field}={value!r}"
        )


def check_count(field: str, value: Any, minimum: int) -> None:
    """Raises unless `value` is an int (not a bool) >= `minimum`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(
            f"Invalid value for `{field}`: expected an int >= "
            f"{minimum}. Received: {field}={value!r}"
        )


def check_pod_fields(
    *,
    image: Any,
    command: Any = None,
    gpus: Any = 0,
    port: Any = None,
    max_restarts: Any = 0,
    env: Mapping[str, str] | None = None,
    backup_dir: Any = None,
    backup_claim: Any = None,
    namespace: Any = None,
) -> dict[str, str]:
    """Checks what every manifest kind shares; returns the env to set.

    `command` and `port` are checked unless None.

    Raises:
        ValueError: a bad field, named with the value received.
    """
    if namespace is not None:
        check_label("namespace", namespace)
    if not isinstance(image, str) or not image.strip() or any(c.isspace() for c in image):
        raise ValueError(
            "Invalid value for `image`: expected a container image "
            f"reference like 'registry/trainer:1.0'. Received: image={image!r}"
        )
    if command is not None and (
        not command or isinstance(command, str) or not all(isinstance(a, str) for a in command)
    ):
        raise ValueError(
            "Invalid value for `command`: expected the program to "
            f"run after `--`. Received: command={command!r}"
        )
    check_count("gpus", gpus, 0)
    check_count("max_restarts", max_restarts, 0)
    if port is not None and (
        isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535
    ):
        raise ValueError(
            f"Invalid value for `port`: expected an int in 1..65535. Received: port={port!r}"
        )
    if backup_dir is not None and (
        not isinstance(backup_dir, str)
        or not backup_dir.startswith("/")
        or ":" in backup_dir
        or any(c.isspace() for c in backup_dir)
    ):
        raise ValueError(
            "Invalid value for `backup_dir`: expected an absolute "
            "path in the container (no ':' or spaces), the one the "
            "program gives DistributedBackupAndRestore. Received: "
            f"backup_dir={backup_dir!r}"
        )
    if backup_claim is not None:
        if backup_dir is None:
            raise ValueError(
                "Invalid value for `backup_claim`: it names the "
                "volume mounted at `backup_dir`; set backup_dir too. "
                f"Received: backup_claim={backup_claim!r}, backup_dir=None"
            )
        if (
            not isinstance(backup_claim, str)
            or not _DNS_SUBDOMAIN.match(backup_claim)
            or len(backup_claim) > 253
        ):
            raise ValueError(
                "Invalid value for `backup_claim`: expected the name "
                "of a PersistentVolumeClaim in the job's namespace. "
                f"Received: backup_claim={backup_claim!r}"
            )
    env = dict(env or {})
    for key in env:
        if not isinstance(key, str) or not _ENV_NAME.match(key):
            raise ValueError(
                "Invalid value for `env`: expected NAME=VALUE with a "
                f"shell-style NAME. Received: {key!r}"
            )
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


# ------------------------------------------------------------ pod pieces
def env_list(env: Mapping[str, str]) -> list[dict[str, Any]]:
    """`[{"name": K, "value": V}, ...]`, sorted by name."""
    return [{"name": k, "value": str(v)} for k, v in sorted(env.items())]


def container(
    name: str,
    image: str,
    command: Sequence[str] | None,
    env: list[dict[str, Any]],
    gpus: int = 0,
    port: int | None = None,
    port_name: str | None = None,
    backup_dir: str | None = None,
) -> dict[str, Any]:
    """A pod's container: `gpus` > 0 sets the `nvidia.com/gpu` limit.

    Kubernetes schedules extended resources such as GPUs by their limit (a
    request, if given, must equal it), so only the limit is written.
    """
    c: dict[str, Any] = {"name": name, "image": image}
    if command is not None:
        c["command"] = list(command)
    if port is not None:
        c["ports"] = [
            {"name": port_name, "containerPort": port} if port_name else {"containerPort": port}
        ]
    c["env"] = env
    if gpus:
        c["resources"] = {"limits": {GPU_RESOURCE: gpus}}
    if backup_dir is not None:
        c["volumeMounts"] = [{"name": BACKUP_VOLUME, "mountPath": backup_dir}]
    return c


def backup_volumes(backup_dir: str | None, backup_claim: str | None) -> list[dict[str, Any]]:
    """The pod's backup volume: the claim when named, else an emptyDir; none without a dir."""
    if backup_dir is None:
        return []
    if backup_claim is not None:
        return [{"name": BACKUP_VOLUME, "persistentVolumeClaim": {"claimName": backup_claim}}]
    return [{"name": BACKUP_VOLUME, "emptyDir": {}}]


def warn_empty_dir(detail: str, backup_dir: str | None, backup_claim: str | None) -> None:
    """Warns that an emptyDir backup volume is deleted with its pod."""
    if backup_dir is not None and backup_claim is None:
        warnings.warn(
            f"backup_dir={backup_dir!r} is an emptyDir volume, deleted with its "
            f"pod (pod deleted, evicted or rescheduled, node lost); {detail}. "
            "Name a PersistentVolumeClaim (backup_claim, --backup-claim) to keep "
            "backups across pods.",
            stacklevel=3,
        )
