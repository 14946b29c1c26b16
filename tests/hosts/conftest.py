"""The `testbed` fixture: one set of emulated hosts per test module.

A module sets `HOSTS = n` (default 2) and `HOST_RATE` ("1gbit" by default).
Where emulated hosts cannot be made (not Linux, not root / no
CAP_NET_ADMIN, no iproute2), the tests that use it skip, saying which.
"""

import pytest

from tests.hosts import testbed as testbed_lib


@pytest.fixture(scope="module")
def testbed(request):
    reason = testbed_lib.unavailable_reason()
    if reason:
        pytest.skip(reason)
    bed = testbed_lib.TestBed(
        getattr(request.module, "HOSTS", 2), rate=getattr(request.module, "HOST_RATE", "1gbit")
    )
    request.addfinalizer(bed.close)
    return bed
