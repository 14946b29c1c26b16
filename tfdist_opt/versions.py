"""The TensorFlow / Keras versions tfdist_opt was tested on, checked at import.

tfdist_opt's Keras 3 fixes and gradient hooks bind to private parts of
Keras and TensorFlow (listed with their reasons in `tfdist_opt/private_api.py`
where present). A version they were not tested on may have moved them, and
the failure would be a deep `AttributeError` far from its cause. So
`import tfdist_opt` compares the installed versions against `SUPPORTED`
(read from package metadata with `importlib.metadata`: TensorFlow is not
imported) and, for any outside it, emits one `UnsupportedVersionWarning`
naming every checked version.

A warning, not an error: a later patch release usually works, and
`tfdist-opt info` must still run to show what is installed. To silence it:
`python -W "ignore:tfdist_opt was tested"` or
`warnings.filterwarnings("ignore", message="tfdist_opt was tested")` before
the import. setup.py pins the same versions (`tests/test_versions.py`
checks the two agree).
"""

from __future__ import annotations

import os
import warnings
from importlib import metadata
from typing import Callable, Mapping

# What the tests ran on: distribution -> major.minor (any patch release).
SUPPORTED = {"tensorflow": "2.21", "keras": "3.15", "tf-keras": "2.21"}
TESTED = "TensorFlow 2.21 (2.21.0), Keras 3.15 (3.15.1), tf-keras 2.21 (2.21.0)"

# Distributions that install the `tensorflow` / `keras` modules.
_DISTRIBUTIONS = {
    "tensorflow": ("tensorflow", "tensorflow-cpu", "tensorflow-gpu",
                   "tensorflow-intel", "tensorflow-macos", "tf-nightly",
                   "tf-nightly-cpu"),
    "keras": ("keras", "keras-nightly"),
    "tf-keras": ("tf-keras", "tf-keras-nightly"),
}


class UnsupportedVersionWarning(UserWarning):
    """TensorFlow, Keras or tf-keras is outside the tested versions."""


def installed_versions(version: Callable[[str], str] = metadata.version
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


def _major_minor(v: str) -> str:
    return ".".join(v.split(".")[:2])


def unsupported_message(installed: Mapping[str, tuple[str, str]]) -> str | None:
    """The warning text when any installed version is outside `SUPPORTED`."""
    bad = [f"{installed[pkg][0]} {installed[pkg][1]} (expected {want}.x)"
           for pkg, want in SUPPORTED.items()
           if pkg in installed and _major_minor(installed[pkg][1]) != want]
    if not bad:
        return None
    return (f"tfdist_opt was tested with {TESTED}; found {', '.join(bad)}. "
            "Its Keras 3 fixes use private TensorFlow/Keras hooks that may "
            "differ in other versions; if something fails, install the "
            "tested versions: pip install \"tensorflow==2.21.*\" "
            "\"keras==3.15.*\" (and \"tf-keras==2.21.*\" for legacy Keras).")


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
