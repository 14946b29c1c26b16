"""Cluster sources: where the list of task addresses comes from. Pure Python.

Each source returns a list of "host:port" addresses (and, where the source
knows it, this process's index); `tf_config.build_tf_config` turns them into
TF_CONFIG. Sources (host lists, local ports and `ClusterSource` live in
`addresses`, SLURM in `slurm`; their public names are re-exported here, so
`sources.<name>` works for every source):

- a host list: `"h1:2222,h2:2222"`;
- a count of local workers on free loopback ports;
- a hostfile of `host slots=N` lines, as DeepSpeed and Horovod read them;
- SLURM: `SLURM_JOB_NODELIST` (with `node[01-04,07]` ranges),
  `SLURM_TASKS_PER_NODE`, `SLURM_NTASKS`, `SLURM_PROCID`;
- a Kubernetes StatefulSet: `NAME-0.SERVICE:PORT`, `NAME-1.SERVICE:PORT`, ...
- a Kubeflow TFJob pod: the TF_CONFIG the Training Operator set, read and
  checked by `tfdist_opt.cluster.k8s.tfjob_cluster` (manifests from
  `tfdist-opt k8s`).
"""

from __future__ import annotations

import os
import re
from typing import Mapping, Sequence

from tfdist_opt.cluster import tf_config as tf_config_lib
from tfdist_opt.cluster.addresses import DEFAULT_PORT
from tfdist_opt.cluster.addresses import ClusterSource
from tfdist_opt.cluster.addresses import free_ports
from tfdist_opt.cluster.addresses import join_address
from tfdist_opt.cluster.addresses import local_addresses
from tfdist_opt.cluster.addresses import parse_host_list
from tfdist_opt.cluster.slurm import expand_nodelist
from tfdist_opt.cluster.slurm import expand_tasks_per_node
from tfdist_opt.cluster.slurm import in_slurm
from tfdist_opt.cluster.slurm import slurm_cluster

__all__ = [
    "DEFAULT_PORT",
    "ClusterSource",
    "assign_ps_roles",
    "expand_nodelist",
    "expand_tasks_per_node",
    "free_ports",
    "in_slurm",
    "join_address",
    "local_addresses",
    "parse_host_list",
    "parse_hostfile",
    "parse_statefulset_spec",
    "read_hostfile",
    "slurm_cluster",
    "statefulset_addresses",
    "statefulset_cluster",
    "statefulset_ordinal",
]


# ------------------------------------------------------------ hostfile
_HOSTFILE_LINE = re.compile(r"^(?P<host>[^\s=]+)(?P<opts>(\s+\S+)*)$")


def parse_hostfile(text: str, port: int = DEFAULT_PORT, source: str = "hostfile") -> list[str]:
    """Hostfile text -> one address per slot.

    Lines are `host slots=N` (DeepSpeed, Horovod, Open MPI); `host` alone
    means one slot, `host:N` is Horovod's short form; `#` starts a comment;
    other `key=value` options (e.g. `max_slots`) are ignored. A host with N
    slots gets N tasks on ports `port`, `port+1`, ...

    Args:
        text: str. The hostfile's contents.
        port: int. First port on each host. Defaults to `2222`.
        source: str. Name for error messages (the path). Defaults to
            `"hostfile"`.

    Returns:
        list of "host:port", hosts in file order, slots consecutive.

    Raises:
        ValueError: a bad `slots` value, a host listed twice, no hosts.

    Example:
        >>> parse_hostfile("node1 slots=2\\nnode2 slots=1\\n")
        ['node1:2222', 'node1:2223', 'node2:2222']
    """
    out: list[str] = []
    seen: dict[str, int] = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        host, slots = fields[0], 1
        if ":" in host and host.rsplit(":", 1)[1].isdigit() and len(fields) == 1:
            host, slots_text = host.rsplit(":", 1)  # Horovod `host:N`
            slots = int(slots_text)
        for opt in fields[1:]:
            key, sep, value = opt.partition("=")
            if not sep:
                raise ValueError(
                    f"Invalid {source} line {lineno}: expected 'host slots=N'. "
                    f"Received: {raw.strip()!r}"
                )
            if key == "slots":
                if not value.isdigit() or int(value) < 1:
                    raise ValueError(
                        f"Invalid {source} line {lineno}: `slots` must be a "
                        f"positive int. Received: slots={value!r}"
                    )
                slots = int(value)
        if slots < 1:
            raise ValueError(
                f"Invalid {source} line {lineno}: `slots` must be "
                f"a positive int. Received: {raw.strip()!r}"
            )
        if host in seen:
            raise ValueError(
                f"Invalid {source} line {lineno}: host {host!r} already listed "
                f"on line {seen[host]}. Received: {raw.strip()!r}"
            )
        seen[host] = lineno
        out.extend(join_address(host, port + k) for k in range(slots))
    if not out:
        raise ValueError(
            f"Invalid {source}: no hosts found (expected lines "
            f"'host slots=N'). Received: {text[:200]!r}"
        )
    return out


def read_hostfile(path: str | os.PathLike, port: int = DEFAULT_PORT) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return parse_hostfile(f.read(), port=port, source=f"hostfile {os.fspath(path)}")


# ------------------------------------------------------------ Kubernetes
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def statefulset_addresses(
    name: str, service: str, replicas: int, port: int = DEFAULT_PORT, namespace: str | None = None
) -> list[str]:
    """Stable pod DNS names of a StatefulSet behind a headless Service.

    Example:
        >>> statefulset_addresses("trainer", "trainer-svc", 2, 2222)
        ['trainer-0.trainer-svc:2222', 'trainer-1.trainer-svc:2222']
    """
    for field, value in (("name", name), ("service", service)) + (
        (("namespace", namespace),) if namespace else ()
    ):
        if not isinstance(value, str) or not _DNS_LABEL.match(value):
            raise ValueError(
                f"Invalid value for `{field}`: expected a DNS label (lower-case "
                f"letters, digits, '-'). Received: {field}={value!r}"
            )
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise ValueError(
            f"Invalid value for `replicas`: expected a positive "
            f"int. Received: replicas={replicas!r}"
        )
    if tf_config_lib.parse_port(str(port)) is None:
        raise ValueError(
            f"Invalid value for `port`: expected an int in 1..65535. Received: port={port!r}"
        )
    domain = f"{service}.{namespace}" if namespace else service
    return [f"{name}-{i}.{domain}:{port}" for i in range(replicas)]


def parse_statefulset_spec(spec: str) -> tuple[str, str, str | None, int]:
    """'NAME.SERVICE[.NAMESPACE]:PORT' -> (name, service, namespace, port)."""
    m = re.fullmatch(r"([^.:\s]+)\.([^.:\s]+)(?:\.([^.:\s]+))?:(\d+)", spec or "")
    if not m or tf_config_lib.parse_port(m.group(4)) is None:
        raise ValueError(
            "Invalid StatefulSet spec: expected 'NAME.SERVICE[.NAMESPACE]:PORT' "
            f"(e.g. 'trainer.trainer-svc:2222'). Received: {spec!r}"
        )
    return m.group(1), m.group(2), m.group(3), int(m.group(4))


def statefulset_ordinal(hostname: str, name: str | None = None) -> int:
    """The pod ordinal of a StatefulSet pod's hostname ('trainer-3' -> 3)."""
    short = hostname.split(".", 1)[0]
    m = re.fullmatch(r"(.+)-(\d+)", short)
    if not m or (name is not None and m.group(1) != name):
        expected = f"'{name}-N'" if name else "'NAME-N'"
        raise ValueError(
            f"Invalid StatefulSet pod hostname: expected {expected}. "
            f"Received: HOSTNAME={hostname!r}"
        )
    return int(m.group(2))


def statefulset_cluster(
    spec: str, replicas: int, environ: Mapping[str, str] | None = None
) -> ClusterSource:
    """Addresses from a 'NAME.SERVICE[.NAMESPACE]:PORT' spec; index from
    `$HOSTNAME` when it is one of the set's pods."""
    environ = os.environ if environ is None else environ
    name, service, namespace, port = parse_statefulset_spec(spec)
    addresses = statefulset_addresses(name, service, replicas, port, namespace)
    index = None
    hostname = environ.get("HOSTNAME", "")
    if hostname.split(".", 1)[0].startswith(name + "-"):
        index = statefulset_ordinal(hostname, name)
        if index >= replicas:
            raise ValueError(
                f"Invalid StatefulSet pod: ordinal {index} is outside "
                f"replicas={replicas}. Received: HOSTNAME={hostname!r}"
            )
    return ClusterSource(tuple(addresses), index, f"StatefulSet {spec}")


# ------------------------------------------------------ parameter servers
def assign_ps_roles(
    addresses: Sequence[str], num_ps: int, index: int | None = None
) -> tuple[dict[str, list[str]], tuple[str, int] | None]:
    """Splits one source's task addresses into chief, workers and ps tasks.

    Task 0 is the chief, the last `num_ps` tasks are parameter servers, the
    rest are workers; so any source (host list, hostfile, SLURM, a
    StatefulSet) can describe a parameter-server cluster.

    Args:
        addresses: the source's "host:port" list, in task order.
        num_ps: int. How many of them are ps tasks (>= 1).
        index: int or None. This process's position in `addresses`.

    Returns:
        `(cluster, (task_type, task_index))`; the second item is None when
        `index` is None.

    Raises:
        ValueError: too few addresses for 1 chief + >= 1 worker + num_ps ps,
            naming the counts.

    Example:
        >>> assign_ps_roles(["h0:1", "h1:1", "h2:1"], 1, index=2)
        ({'chief': ['h0:1'], 'worker': ['h1:1'], 'ps': ['h2:1']}, ('ps', 0))
    """
    if isinstance(num_ps, bool) or not isinstance(num_ps, int) or num_ps < 1:
        raise ValueError(
            f"Invalid value for `--num-ps`: expected a positive int. Received: --num-ps={num_ps!r}"
        )
    n = len(addresses)
    if n < num_ps + 2:
        raise ValueError(
            f"Invalid parameter-server cluster: {n} task address(es) cannot hold "
            f"1 chief + at least 1 worker + {num_ps} ps. Received: {n} "
            f"address(es), --num-ps={num_ps}. Expected at least {num_ps + 2} "
            "addresses (or fewer ps tasks)."
        )
    addresses = list(addresses)
    cluster = {
        "chief": addresses[:1],
        "worker": addresses[1 : n - num_ps],
        "ps": addresses[n - num_ps :],
    }
    if index is None:
        return cluster, None
    if index == 0:
        return cluster, ("chief", 0)
    if index < n - num_ps:
        return cluster, ("worker", index - 1)
    return cluster, ("ps", index - (n - num_ps))
