"""Fixtures for the real-SLURM tests: one cluster per module, a submit directory.

A module sets `SLURM_NODES = n` (default 2) and may set
`SLURMD_TIMEOUT_S` (SLURM's `SlurmdTimeout`, default 60: how long before the
controller marks a silent node DOWN). Where a cluster cannot be
started (not root, no network namespaces, Debian's `slurm-wlm`/`munge` not
installed), the tests that use it skip, saying which.
"""

import os
import sys

import pytest

from tests.hosts import testbed as testbed_lib
from tests.slurm import cluster as cluster_lib


@pytest.fixture(scope="module")
def slurm(request):
    reason = cluster_lib.unavailable_reason()
    if reason:
        pytest.skip(reason)
    cluster = cluster_lib.SlurmCluster(
        getattr(request.module, "SLURM_NODES", 2),
        slurmd_timeout_s=getattr(request.module, "SLURMD_TIMEOUT_S", 60),
    )
    request.addfinalizer(cluster.close)
    return cluster


@pytest.fixture
def submit_dir(tmp_path):
    """A directory laid out like the repository root, to submit jobs from.

    The docs' job script runs from the repository root (`source
    .venv/bin/activate`, `docs/examples/...`) and writes its output file and
    backups there; links to this venv and to `docs/` let it run unchanged
    while what it writes lands in a temporary directory.
    """
    os.chmod(tmp_path, 0o755)
    (tmp_path / ".venv").symlink_to(sys.prefix)
    (tmp_path / "docs").symlink_to(os.path.join(testbed_lib.REPO_ROOT, "docs"))
    return tmp_path
