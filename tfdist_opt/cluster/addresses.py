"""Task addresses: the `ClusterSource` every source returns, host lists and
local ports. Pure Python.

`tfdist_opt.cluster.sources` re-exports every public name here.
"""

from __future__ import annotations

import dataclasses
import socket

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
        raise TypeError(
            f"Invalid host list: expected a str like "
            f"'h1:2222,h2:2222'. Received: {type(text).__name__}"
        )
    out = []
    for i, raw in enumerate(text.split(",")):
        entry = raw.strip()
        if not entry:
            raise ValueError(
                f"Invalid host list: entry {i} is empty; expected "
                f"'host:port,host:port'. Received: {text!r}"
            )
        host, port = tf_config_lib.split_address(entry)
        if port is None and default_port is not None:
            entry = join_address(host, default_port)
            port = str(default_port)
        if tf_config_lib.parse_port(port) is None:
            raise ValueError(
                f"Invalid host list: entry {entry!r} needs a port in 1..65535 "
                f"('host:port'). Received: {text!r}"
            )
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


def local_addresses(n: int, host: str = "localhost", ports: list[int] | None = None) -> list[str]:
    """n loopback addresses on free ports (or on `ports`)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"Invalid value for `n`: expected a positive int. Received: n={n!r}")
    if not tf_config_lib.is_loopback_host(host):
        raise ValueError(
            f"Invalid value for `host`: local workers listen on loopback only "
            f"(TF's gRPC server is unauthenticated). Received: host={host!r}"
        )
    ports = free_ports(n) if ports is None else list(ports)
    return [join_address(host, p) for p in ports]


def join_address(host: str, port: int) -> str:
    """ "host:port", bracketing an IPv6 host."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
