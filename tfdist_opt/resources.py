"""Where the presets (`configs/`) and benchmark binaries (`benchmarks/`) live.

The repository's top-level `configs/` and `benchmarks/` are the source of
truth. A built wheel carries copies of them inside the package, at
`tfdist_opt/_data/configs/` and `tfdist_opt/_data/benchmarks/` (setup.py's
`build_py` step copies them at build time; nothing is kept twice in git).
This module finds them in either layout:

1. a source checkout or editable install: `configs/` / `benchmarks/` next to
   the `tfdist_opt/` package, when `setup.py` is there too (so a stray
   `configs/` folder in `site-packages` is never taken for ours);
2. an installed wheel: the package's own `_data/<name>/`, through
   `importlib.resources`.

Pure Python, no TensorFlow.
"""

from __future__ import annotations

import pathlib
from importlib import resources

PACKAGE = "tfdist_opt"
DATA_DIR = "_data"  # inside the package, in a built wheel
SHIPPED = ("configs", "benchmarks")


def checkout_root() -> pathlib.Path | None:
    """The source checkout holding this package, or None when installed."""
    root = pathlib.Path(__file__).resolve().parent.parent
    return root if (root / "setup.py").is_file() else None


def data_dir(name: str) -> pathlib.Path | None:
    """The `configs` or `benchmarks` folder in use, or None if neither exists.

    Args:
        name: str. `"configs"` or `"benchmarks"`.

    Returns:
        A directory path (checkout first, then the wheel's copy), or None.

    Raises:
        ValueError: `name` is not one of the shipped folders.
    """
    if name not in SHIPPED:
        raise ValueError(
            f"Unrecognized data folder: {name!r}. Expected one of: {', '.join(SHIPPED)}."
        )
    root = checkout_root()
    if root is not None and (root / name).is_dir():
        return root / name
    packaged = resources.files(PACKAGE).joinpath(DATA_DIR, name)
    if packaged.is_dir():
        # A wheel installs as plain files, so this is a real path (the
        # benchmark binaries must be run from disk, not from a zip).
        return pathlib.Path(str(packaged))
    return None


def describe_locations(name: str) -> str:
    """Where `data_dir(name)` looked, for error messages."""
    root = pathlib.Path(__file__).resolve().parent
    return f"{root.parent / name} (source checkout) and {root / DATA_DIR / name} (installed wheel)"
