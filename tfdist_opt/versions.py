"""The TensorFlow / Keras versions tfdist_opt is tested on, checked at import.

tfdist_opt's Keras 3 fixes and gradient hooks bind to private parts of
Keras and TensorFlow (listed with their reasons in `tfdist_opt/private_api.py`).
A version they were not tested on may have moved them, and the failure
would be a deep `AttributeError` far from its cause. So `import tfdist_opt`
compares the installed versions against the tested set (read from package
metadata with `importlib.metadata`: TensorFlow is not imported) and, for any
outside it, emits one `UnsupportedVersionWarning` naming every checked
version.

The tested set is what the version matrix (`.ci/version_matrix`) runs:
each TensorFlow minor in `TENSORFLOW` with the lowest Keras it supports
(`KERAS[tf][0]`) and the highest (`KERAS[tf][1]`); a Keras minor between
the two is in the set. tf-keras (legacy Keras) must have TensorFlow's minor,
as each tf-keras release requires. pyproject.toml's requirements say the
same (`tests/test_versions.py` checks the two agree).

A warning, not an error: a later patch release usually works, and
`tfdist-opt info` must still run to show what is installed. To silence it:
`python -W "ignore:tfdist_opt was tested"` or
`warnings.filterwarnings("ignore", message="tfdist_opt was tested")` before
the import.
"""

from __future__ import annotations

import os
import warnings
from importlib import metadata
from typing import Callable, Mapping

# TensorFlow minors the matrix runs, oldest first.
TENSORFLOW = ("2.18", "2.19", "2.20", "2.21")
# Per TensorFlow minor: (lowest, highest) Keras minor tested. TensorFlow's
# own floors are 3.5 (2.18, 2.19), 3.10 (2.20) and 3.12 (2.21); ours is
# 3.12 everywhere: with Keras 3.10 (TF 2.19) the Keras option matrix also
# failed `jit_compile=True` under Mirrored.
KERAS = {
    "2.18": ("3.12", "3.15"),
    "2.19": ("3.12", "3.15"),
    "2.20": ("3.12", "3.15"),
    "2.21": ("3.12", "3.15"),
}
_KERAS_ALL = (
    min((k[0] for k in KERAS.values()), key=lambda v: tuple(map(int, v.split(".")))),
    max((k[1] for k in KERAS.values()), key=lambda v: tuple(map(int, v.split(".")))),
)
# Per TensorFlow minor: (lowest, highest) Python with TensorFlow wheels, our
# floor being 3.11 (tomllib). The matrix here runs Python 3.11.
PYTHON = {
    "2.18": ("3.11", "3.12"),
    "2.19": ("3.11", "3.12"),
    "2.20": ("3.11", "3.13"),
    "2.21": ("3.11", "3.13"),
}

# Distributions that install the `tensorflow` / `keras` / `tf_keras` modules.
_DISTRIBUTIONS = {
    "tensorflow": (
        "tensorflow",
        "tensorflow-cpu",
        "tensorflow-gpu",
        "tensorflow-intel",
        "tensorflow-macos",
        "tf-nightly",
        "tf-nightly-cpu",
    ),
    "keras": ("keras", "keras-nightly"),
    "tf-keras": ("tf-keras", "tf-keras-nightly"),
}


class UnsupportedVersionWarning(UserWarning):
    """TensorFlow, Keras or tf-keras is outside the tested versions."""


def installed_versions(
    version: Callable[[str], str] = metadata.version,
) -> dict[str, tuple[str, str]]:
    """{"tensorflow"|"keras"|"tf-keras": (distribution, version)} installed.

    Args:
        version: callable. `importlib.metadata.version` (or a stand-in).
    """
    found = {}
    for package, names in _DISTRIBUTIONS.items():
        for name in names:
            try:
                found[package] = (name, version(name))
                break
            except metadata.PackageNotFoundError:
                continue
    return found


def _minor(v: str) -> tuple[int, int]:
    """(major, minor) of a version string ("2.22.0.dev2026" -> (2, 22))."""
    parts = []
    for piece in v.split(".")[:2]:
        digits = "".join(c for c in piece if c.isdigit()) if piece else ""
        parts.append(int(digits) if digits else 0)
    while len(parts) < 2:
        parts.append(0)
    return parts[0], parts[1]


def _mm(v: str) -> str:
    return "%d.%d" % _minor(v)


def keras_tested(version: str) -> bool:
    """Whether a Keras version is inside the tested range (any TensorFlow)."""
    return _minor(_KERAS_ALL[0]) <= _minor(version) <= _minor(_KERAS_ALL[1])


KERAS_RANGE = "%s-%s" % _KERAS_ALL  # e.g. "3.12-3.15"


def tested_set() -> str:
    """The tested set in words, as the warning and `tfdist-opt info` say it."""
    floors = {}
    for tf in TENSORFLOW:
        floors.setdefault(KERAS[tf], []).append(tf)
    keras = "; ".join(
        f"Keras {lo}-{hi} with TensorFlow {', '.join(tfs)}" for (lo, hi), tfs in floors.items()
    )
    return f"TensorFlow {TENSORFLOW[0]}-{TENSORFLOW[-1]} ({keras}; tf-keras of TensorFlow's minor)"


def check(installed: Mapping[str, tuple[str, str]]) -> dict[str, str | None]:
    """Per installed package, why it is outside the tested set (None: inside).

    Args:
        installed: mapping. What `installed_versions()` returns.

    Returns:
        {"tensorflow"|"keras"|"tf-keras": reason or None}, for the packages
        in `installed`. Keras and tf-keras are judged against the installed
        TensorFlow's minor (against the whole range when it is absent or
        outside the set).
    """
    out: dict[str, str | None] = {}
    tf = _mm(installed["tensorflow"][1]) if "tensorflow" in installed else None
    tf_known = tf in TENSORFLOW
    if "tensorflow" in installed:
        out["tensorflow"] = (
            None if tf_known else (f"expected {TENSORFLOW[0]}.x to {TENSORFLOW[-1]}.x")
        )
    if "keras" in installed:
        lo, hi = KERAS[tf] if tf_known else _KERAS_ALL
        got = _minor(installed["keras"][1])
        out["keras"] = (
            None
            if _minor(lo) <= got <= _minor(hi)
            else (f"expected {lo}.x to {hi}.x" + (f" with TensorFlow {tf}" if tf_known else ""))
        )
    if "tf-keras" in installed:
        want = tf if tf_known else None
        got = _mm(installed["tf-keras"][1])
        if want is None:
            out["tf-keras"] = (
                None if got in TENSORFLOW else (f"expected {TENSORFLOW[0]}.x to {TENSORFLOW[-1]}.x")
            )
        else:
            out["tf-keras"] = None if got == want else (f"expected {want}.x, TensorFlow's minor")
    return out


def unsupported_message(installed: Mapping[str, tuple[str, str]]) -> str | None:
    """The warning text when any installed version is outside the tested set."""
    bad = [
        f"{installed[pkg][0]} {installed[pkg][1]} ({why})"
        for pkg, why in check(installed).items()
        if why
    ]
    if not bad:
        return None
    return (
        f"tfdist_opt was tested with {tested_set()}; found {', '.join(bad)}. "
        "Its Keras 3 fixes use private TensorFlow/Keras hooks that may "
        "differ in other versions; if something fails, install tested "
        f'versions: pip install "tensorflow>={TENSORFLOW[0]},'
        f'<{_next(TENSORFLOW[-1])}" "keras>={_KERAS_ALL[0]},'
        f"<{_next(_KERAS_ALL[1])}\" (and the `legacy` extra's "
        "tf-keras for legacy Keras)."
    )


def _next(minor: str) -> str:
    major, m = _minor(minor)
    return f"{major}.{m + 1}"


def warn_if_unsupported(version: Callable[[str], str] = metadata.version) -> str | None:
    """Emits `UnsupportedVersionWarning` once if a version is untested.

    Returns:
        The message, or None when every installed version is supported.
    """
    message = unsupported_message(installed_versions(version))
    if message:
        warnings.warn(message, UnsupportedVersionWarning, stacklevel=2)
    return message


def uses_legacy_keras() -> bool:
    """Whether `tf.keras` is tf_keras here: TensorFlow's own test of
    `TF_USE_LEGACY_KERAS` (`"1"`, `"true"` or `"True"`)."""
    return os.environ.get("TF_USE_LEGACY_KERAS", "") in ("1", "true", "True")
