"""The files a benchmark report is written to: JSON, CSV, PNG plot.

`benchmarks.common.write_report` builds the report and, on the chief,
writes it through these (re-exported from `benchmarks.common`).
matplotlib is imported only when a plot is asked for.
"""

from __future__ import annotations

import csv
import dataclasses
import os
from typing import Any, Mapping, Sequence


@dataclasses.dataclass(frozen=True)
class PlotSpec:
    """What `write_report` plots: `ys` columns of the result rows against `x`.

    Attributes:
        x: str. Column for the x axis (a number or a label).
        ys: tuple of str. Columns to draw, one bar group / line each.
        title: str. Plot title.
        kind: str. `"bar"` or `"line"`.
        ylabel: str. Y axis label.
    """

    x: str
    ys: tuple[str, ...]
    title: str = ""
    kind: str = "bar"
    ylabel: str = ""


def write_csv(path: str, rows: Sequence[Mapping[str, Any]]) -> None:
    """Rows to CSV; columns are the union of keys in first-seen order."""
    columns: list[str] = []
    for row in rows:
        columns += [k for k in row if k not in columns]
    makedirs_for(path)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: row.get(k, "") for k in columns})


def plot_results(path: str, rows: Sequence[Mapping[str, Any]], spec: PlotSpec) -> None:
    """PNG of `spec.ys` against `spec.x`; matplotlib is imported lazily."""
    try:
        import matplotlib  # pylint: disable=g-import-not-at-top

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top
    except ImportError as e:
        raise ImportError(
            "--plot needs matplotlib, which is not installed. Install it with "
            "`pip install matplotlib` (or `pip install tfdist_opt[plot]`), or "
            "drop --plot."
        ) from e
    xs = [str(r.get(spec.x)) for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4))
    if spec.kind == "line":
        for y in spec.ys:
            ax.plot(xs, [r.get(y) for r in rows], marker="o", label=y)
    else:
        width = 0.8 / max(1, len(spec.ys))
        for k, y in enumerate(spec.ys):
            ax.bar(
                [i + k * width for i in range(len(xs))],
                [r.get(y) or 0 for r in rows],
                width=width,
                label=y,
            )
        ax.set_xticks([i + width * (len(spec.ys) - 1) / 2 for i in range(len(xs))])
        ax.set_xticklabels(xs, rotation=20, ha="right")
    ax.set_xlabel(spec.x)
    ax.set_ylabel(spec.ylabel)
    ax.set_title(spec.title)
    ax.legend()
    fig.tight_layout()
    makedirs_for(path)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def makedirs_for(path: str) -> None:
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)


def json_default(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if isinstance(value, (set, tuple)):
        return list(value)
    return str(value)
