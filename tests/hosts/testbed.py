"""Emulated hosts for the multi-host tests: the benchmarks' test bed.

One implementation (`benchmarks/testbed_lib.py`) serves `benchmarks/link_speed.py`
and these tests; the names a test uses are re-exported here.
"""

from benchmarks.testbed_lib import (  # noqa: F401
    PREFIX,
    REPO_ROOT,
    SUBNET,
    Host,
    TestBed,
    namespaces,
    sweep_stale,
    unavailable_reason,
)
