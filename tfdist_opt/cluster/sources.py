"""Cluster sources: where the list of task addresses comes from. Pure Python.

Each source returns a list of "host:port" addresses (and, where the source
knows it, this process's index); `tf_config.build_tf_config` turns them into
TF_CONFIG. Sources:

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

import dataclasses
import os
import re
import socket
from typing import Mapping, Sequence

from tfdist_opt.cluster import tf_config as tf_config_lib

DEFAULT_PORT = 2222


@dataclasses.dataclass(frozen=True)
class ClusterSource:
    """Addresses from one source, and this process's place if known.

    Attributes:
        addresses: tuple of str. "host:port" per task, in index order.
        index: int or None. This process's index, when the source knows it
            (SLURM_PROCID, a StatefulSet ordinal).
        description: str. Where the addresses came from, for messages.
    """

    addresses: tuple[str, ...]
    index: int | None = None
    description: str = ""


# ------------------------------------------------------------ host list
def parse_host_list(text: str, default_port: int | None = None) -> list[str]:
    """'h1:2222,h2:2222' -> ['h1:2222', 'h2:2222'].

    Args:
        text: str. Comma-separated "host[:port]" entries (spaces allowed).
        default_port: int or None. Port for entries without one; None makes
            a missing port an error. Defaults to `None`.

    Raises:
        ValueError: an empty entry, a missing or invalid port.
    """
    if not isinstance(text, str):
        raise TypeError(f"Invalid host list: expected a str like "
                        f"'h1:2222,h2:2222'. Received: {type(text).__name__}")
    out = []
    for i, raw in enumerate(text.split(",")):
        entry = raw.strip()
        if not entry:
            raise ValueError(
                f"Invalid host list: entry {i} is empty; expected "
                f"'host:port,host:port'. Received: {text!r}")
        host, port = tf_config_lib.split_address(entry)
        if port is None and default_port is not None:
            entry = _join(host, default_port)
            port = str(default_port)
        if tf_config_lib.parse_port(port) is None:
            raise ValueError(
                f"Invalid host list: entry {entry!r} needs a port in 1..65535 "
                f"('host:port'). Received: {text!r}")
        out.append(entry)
    return out


# ------------------------------------------------------------ local
def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """n distinct free TCP ports on `host` (all held open while chosen)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def local_addresses(n: int, host: str = "localhost",
                    ports: list[int] | None = None) -> list[str]:
    """n loopback addresses on free ports (or on `ports`)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"Invalid value for `n`: expected a positive int. "
                         f"Received: n={n!r}")
    if not tf_config_lib.is_loopback_host(host):
        raise ValueError(
            f"Invalid value for `host`: local workers listen on loopback only "
            f"(TF's gRPC server is unauthenticated). Received: host={host!r}")
    ports = free_ports(n) if ports is None else list(ports)
    return [_join(host, p) for p in ports]


# ------------------------------------------------------------ hostfile
_HOSTFILE_LINE = re.compile(r"^(?P<host>[^\s=]+)(?P<opts>(\s+\S+)*)$")


def parse_hostfile(text: str, port: int = DEFAULT_PORT,
                   source: str = "hostfile") -> list[str]:
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
                    f"Received: {raw.strip()!r}")
            if key == "slots":
                if not value.isdigit() or int(value) < 1:
                    raise ValueError(
                        f"Invalid {source} line {lineno}: `slots` must be a "
                        f"positive int. Received: slots={value!r}")
                slots = int(value)
        if slots < 1:
            raise ValueError(f"Invalid {source} line {lineno}: `slots` must be "
                             f"a positive int. Received: {raw.strip()!r}")
        if host in seen:
            raise ValueError(
                f"Invalid {source} line {lineno}: host {host!r} already listed "
                f"on line {seen[host]}. Received: {raw.strip()!r}")
        seen[host] = lineno
        out.extend(_join(host, port + k) for k in range(slots))
    if not out:
        raise ValueError(f"Invalid {source}: no hosts found (expected lines "
                         f"'host slots=N'). Received: {text[:200]!r}")
    return out


def read_hostfile(path: str | os.PathLike, port: int = DEFAULT_PORT) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return parse_hostfile(f.read(), port=port,
                              source=f"hostfile {os.fspath(path)}")


# ------------------------------------------------------------ SLURM
def expand_nodelist(nodelist: str) -> list[str]:
    """Expands a SLURM hostlist expression.

    Handles comma-separated entries, bracketed ranges with zero padding and
    several bracket groups per name (a cartesian product, as `scontrol show
    hostnames` does).

    Example:
        >>> expand_nodelist("node[01-03,07],gpu-a1")
        ['node01', 'node02', 'node03', 'node07', 'gpu-a1']
    """
    if not isinstance(nodelist, str) or not nodelist.strip():
        raise ValueError("Invalid SLURM node list: expected e.g. "
                         f"'node[01-04,07]'. Received: {nodelist!r}")
    out: list[str] = []
    for entry in _split_top_level(nodelist.strip(), nodelist):
        out.extend(_expand_entry(entry, nodelist))
    return out


def _split_top_level(text: str, whole: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                break
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth != 0:
        raise ValueError(f"Invalid SLURM node list: unbalanced brackets. "
                         f"Received: {whole!r}")
    parts.append("".join(cur))
    if any(not p.strip() for p in parts):
        raise ValueError(f"Invalid SLURM node list: empty entry. "
                         f"Received: {whole!r}")
    return [p.strip() for p in parts]


def _expand_entry(entry: str, whole: str) -> list[str]:
    m = re.search(r"\[([^\]]*)\]", entry)
    if not m:
        return [entry]
    prefix, suffix = entry[:m.start()], entry[m.end():]
    out = []
    for item in m.group(1).split(","):
        item = item.strip()
        lo, sep, hi = item.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(
                f"Invalid SLURM node list: bad range {item!r} in {entry!r}. "
                f"Received: {whole!r}")
        if not sep:
            hi = lo
        if int(hi) < int(lo):
            raise ValueError(
                f"Invalid SLURM node list: descending range {item!r}. "
                f"Received: {whole!r}")
        width = len(lo)
        for k in range(int(lo), int(hi) + 1):
            out.extend(_expand_entry(f"{prefix}{k:0{width}d}{suffix}", whole))
    return out


def expand_tasks_per_node(text: str, num_nodes: int) -> list[int]:
    """SLURM_TASKS_PER_NODE ('2(x3),1') -> [2, 2, 2, 1]."""
    counts: list[int] = []
    for item in text.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", item)
        if not m:
            raise ValueError(
                "Invalid SLURM_TASKS_PER_NODE: expected e.g. '2(x3),1'. "
                f"Received: SLURM_TASKS_PER_NODE={text!r}")
        counts.extend([int(m.group(1))] * int(m.group(2) or 1))
    if len(counts) != num_nodes:
        raise ValueError(
            f"Invalid SLURM_TASKS_PER_NODE: describes {len(counts)} node(s) "
            f"but the node list has {num_nodes}. "
            f"Received: SLURM_TASKS_PER_NODE={text!r}")
    return counts


def in_slurm(environ: Mapping[str, str] | None = None) -> bool:
    environ = os.environ if environ is None else environ
    return bool(environ.get("SLURM_JOB_ID") and _first(environ, _NODELIST_VARS))


_NODELIST_VARS = ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
_TPN_VARS = ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")
_NTASKS_VARS = ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS")


def _first(environ: Mapping[str, str], names: tuple[str, ...]):
    for name in names:
        if environ.get(name, "").strip():
            return name, environ[name].strip()
    return None


def slurm_cluster(environ: Mapping[str, str] | None = None,
                  port: int = DEFAULT_PORT) -> ClusterSource:
    """Task addresses of this SLURM job (step), and this task's index.

    Tasks are laid out as SLURM's default block distribution does: node by
    node in node-list order, `SLURM_TASKS_PER_NODE` tasks on each; the k-th
    task on a node listens on `port + k`. Step variables (`SLURM_STEP_*`,
    set inside `srun`) win over job variables.

    Args:
        environ: mapping or None. Defaults to `os.environ`.
        port: int. First port on each node. Defaults to `2222`.

    Returns:
        `ClusterSource` with `index` = `SLURM_PROCID` (None outside a task).

    Raises:
        ValueError: not in a SLURM allocation, or inconsistent variables,
            naming the variable and its value.
    """
    environ = os.environ if environ is None else environ
    found = _first(environ, _NODELIST_VARS)
    if found is None:
        raise ValueError(
            "Not inside a SLURM allocation: SLURM_JOB_NODELIST is unset. "
            "Run under salloc/sbatch, or pass --workers/--hostfile. "
            f"Received: SLURM_JOB_NODELIST={environ.get('SLURM_JOB_NODELIST')!r}")
    nodes = expand_nodelist(found[1])
    tpn = _first(environ, _TPN_VARS)
    ntasks = _first(environ, _NTASKS_VARS)
    if tpn is not None:
        counts = expand_tasks_per_node(tpn[1], len(nodes))
    elif ntasks is not None:
        n = _parse_int(*ntasks)
        if n % len(nodes):
            raise ValueError(
                f"Invalid {ntasks[0]}: {n} task(s) do not divide evenly over "
                f"{len(nodes)} node(s) and SLURM_TASKS_PER_NODE is unset. "
                f"Received: {ntasks[0]}={ntasks[1]!r}, {found[0]}={found[1]!r}")
        counts = [n // len(nodes)] * len(nodes)
    else:
        counts = [1] * len(nodes)
    addresses = [_join(node, port + k) for node, c in zip(nodes, counts)
                 for k in range(c)]
    if ntasks is not None and _parse_int(*ntasks) != len(addresses):
        raise ValueError(
            f"Invalid SLURM environment: {ntasks[0]}={ntasks[1]!r} but "
            f"{tpn[0] if tpn else 'the node list'} gives {len(addresses)} "
            f"task(s). Received: {found[0]}={found[1]!r}")
    index = None
    if environ.get("SLURM_PROCID", "").strip():
        index = _parse_int("SLURM_PROCID", environ["SLURM_PROCID"])
        if not 0 <= index < len(addresses):
            raise ValueError(
                f"Invalid SLURM_PROCID: expected an int in [0, "
                f"{len(addresses)}). Received: SLURM_PROCID={index}")
    return ClusterSource(tuple(addresses), index,
                         f"SLURM {found[0]}={found[1]}")


def _parse_int(name: str, text: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise ValueError(f"Invalid {name}: expected an int. "
                         f"Received: {name}={text!r}") from None
    if value < 0:
        raise ValueError(f"Invalid {name}: expected a non-negative int. "
                         f"Received: {name}={text!r}")
    return value


# ------------------------------------------------------------ Kubernetes
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def statefulset_addresses(name: str, service: str, replicas: int,
                          port: int = DEFAULT_PORT,
                          namespace: str | None = None) -> list[str]:
    """Stable pod DNS names of a StatefulSet behind a headless Service.

    Example:
        >>> statefulset_addresses("trainer", "trainer-svc", 2, 2222)
        ['trainer-0.trainer-svc:2222', 'trainer-1.trainer-svc:2222']
    """
    for field, value in (("name", name), ("service", service)) + (
            (("namespace", namespace),) if namespace else ()):
        if not isinstance(value, str) or not _DNS_LABEL.match(value):
            raise ValueError(
                f"Invalid value for `{field}`: expected a DNS label (lower-case "
                f"letters, digits, '-'). Received: {field}={value!r}")
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise ValueError(f"Invalid value for `replicas`: expected a positive "
                         f"int. Received: replicas={replicas!r}")
    if tf_config_lib.parse_port(str(port)) is None:
        raise ValueError(f"Invalid value for `port`: expected an int in "
                         f"1..65535. Received: port={port!r}")
    domain = f"{service}.{namespace}" if namespace else service
    return [f"{name}-{i}.{domain}:{port}" for i in range(replicas)]


def parse_statefulset_spec(spec: str) -> tuple[str, str, str | None, int]:
    """'NAME.SERVICE[.NAMESPACE]:PORT' -> (name, service, namespace, port)."""
    m = re.fullmatch(r"([^.:\s]+)\.([^.:\s]+)(?:\.([^.:\s]+))?:(\d+)", spec or "")
    if not m or tf_config_lib.parse_port(m.group(4)) is None:
        raise ValueError(
            "Invalid StatefulSet spec: expected 'NAME.SERVICE[.NAMESPACE]:PORT' "
            f"(e.g. 'trainer.trainer-svc:2222'). Received: {spec!r}")
    return m.group(1), m.group(2), m.group(3), int(m.group(4))


def statefulset_ordinal(hostname: str, name: str | None = None) -> int:
    """The pod ordinal of a StatefulSet pod's hostname ('trainer-3' -> 3)."""
    short = hostname.split(".", 1)[0]
    m = re.fullmatch(r"(.+)-(\d+)", short)
    if not m or (name is not None and m.group(1) != name):
        expected = f"'{name}-N'" if name else "'NAME-N'"
        raise ValueError(
            f"Invalid StatefulSet pod hostname: expected {expected}. "
            f"Received: HOSTNAME={hostname!r}")
    return int(m.group(2))


def statefulset_cluster(spec: str, replicas: int,
                        environ: Mapping[str, str] | None = None
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
                f"replicas={replicas}. Received: HOSTNAME={hostname!r}")
    return ClusterSource(tuple(addresses), index, f"StatefulSet {spec}")


def _join(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


# ------------------------------------------------------ parameter servers
def assign_ps_roles(addresses: Sequence[str], num_ps: int,
                    index: int | None = None
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
        raise ValueError("Invalid value for `--num-ps`: expected a positive int. "
                         f"Received: --num-ps={num_ps!r}")
    n = len(addresses)
    if n < num_ps + 2:
        raise ValueError(
            f"Invalid parameter-server cluster: {n} task address(es) cannot hold "
            f"1 chief + at least 1 worker + {num_ps} ps. Received: {n} "
            f"address(es), --num-ps={num_ps}. Expected at least {num_ps + 2} "
            "addresses (or fewer ps tasks).")
    addresses = list(addresses)
    cluster = {"chief": addresses[:1], "worker": addresses[1:n - num_ps],
               "ps": addresses[n - num_ps:]}
    if index is None:
        return cluster, None
    if index == 0:
        return cluster, ("chief", 0)
    if index < n - num_ps:
        return cluster, ("worker", index - 1)
    return cluster, ("ps", index - (n - num_ps))
