"""SLURM: the hostlist syntax and the task layout of a job (step). Pure Python.

`slurm_cluster()` reads `SLURM_JOB_NODELIST` (with `node[01-04,07]`
ranges), `SLURM_TASKS_PER_NODE`, `SLURM_NTASKS` and `SLURM_PROCID` (step
variables first) into a `ClusterSource`. `tfdist_opt.cluster.sources`
re-exports every public name here.
"""

from __future__ import annotations

import os
import re
from typing import Mapping

from tfdist_opt.cluster.addresses import DEFAULT_PORT
from tfdist_opt.cluster.addresses import ClusterSource
from tfdist_opt.cluster.addresses import join_address


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
        raise ValueError(
            f"Invalid SLURM node list: expected e.g. 'node[01-04,07]'. Received: {nodelist!r}"
        )
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
        raise ValueError(f"Invalid SLURM node list: unbalanced brackets. Received: {whole!r}")
    parts.append("".join(cur))
    if any(not p.strip() for p in parts):
        raise ValueError(f"Invalid SLURM node list: empty entry. Received: {whole!r}")
    return [p.strip() for p in parts]


def _expand_entry(entry: str, whole: str) -> list[str]:
    m = re.search(r"\[([^\]]*)\]", entry)
    if not m:
        return [entry]
    prefix, suffix = entry[: m.start()], entry[m.end() :]
    out = []
    for item in m.group(1).split(","):
        item = item.strip()
        lo, sep, hi = item.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(
                f"Invalid SLURM node list: bad range {item!r} in {entry!r}. Received: {whole!r}"
            )
        if not sep:
            hi = lo
        if int(hi) < int(lo):
            raise ValueError(
                f"Invalid SLURM node list: descending range {item!r}. Received: {whole!r}"
            )
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
                f"Received: SLURM_TASKS_PER_NODE={text!r}"
            )
        counts.extend([int(m.group(1))] * int(m.group(2) or 1))
    if len(counts) != num_nodes:
        raise ValueError(
            f"Invalid SLURM_TASKS_PER_NODE: describes {len(counts)} node(s) "
            f"but the node list has {num_nodes}. "
            f"Received: SLURM_TASKS_PER_NODE={text!r}"
        )
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


def slurm_cluster(
    environ: Mapping[str, str] | None = None, port: int = DEFAULT_PORT
) -> ClusterSource:
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
            f"Received: SLURM_JOB_NODELIST={environ.get('SLURM_JOB_NODELIST')!r}"
        )
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
                f"Received: {ntasks[0]}={ntasks[1]!r}, {found[0]}={found[1]!r}"
            )
        counts = [n // len(nodes)] * len(nodes)
    else:
        counts = [1] * len(nodes)
    addresses = [join_address(node, port + k) for node, c in zip(nodes, counts) for k in range(c)]
    if ntasks is not None and _parse_int(*ntasks) != len(addresses):
        raise ValueError(
            f"Invalid SLURM environment: {ntasks[0]}={ntasks[1]!r} but "
            f"{tpn[0] if tpn else 'the node list'} gives {len(addresses)} "
            f"task(s). Received: {found[0]}={found[1]!r}"
        )
    index = None
    if environ.get("SLURM_PROCID", "").strip():
        index = _parse_int("SLURM_PROCID", environ["SLURM_PROCID"])
        if not 0 <= index < len(addresses):
            raise ValueError(
                f"Invalid SLURM_PROCID: expected an int in [0, "
                f"{len(addresses)}). Received: SLURM_PROCID={index}"
            )
    return ClusterSource(tuple(addresses), index, f"SLURM {found[0]}={found[1]}")


def _parse_int(name: str, text: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise ValueError(f"Invalid {name}: expected an int. Received: {name}={text!r}") from None
    if value < 0:
        raise ValueError(f"Invalid {name}: expected a non-negative int. Received: {name}={text!r}")
    return value
