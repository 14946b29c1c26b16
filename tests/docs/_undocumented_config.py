"""A config dataclass for tests/docs/test_site.py: one field lacks its Args entry."""

import dataclasses

ENV_PREFIX = "TFDIST_OPT_TEST_"


@dataclasses.dataclass(frozen=True)
class TwoFields:
    """Two fields, one documented.

    Args:
        rank: int. Rank of the factors. Defaults to `4`.
    """

    rank: int = 4
    stall_warn_s: float | None = None
