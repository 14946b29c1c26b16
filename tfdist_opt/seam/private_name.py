"""`PrivateName`: one entry of the manifest of private TF/Keras names.

Pure data, apart from the manifest (`tfdist_opt.seam.manifest`) so the
area modules that list the entries and the manifest that joins them import
it without importing each other.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class PrivateName:
    """One private name.

    Attributes:
        owner: str. Dotted path of the module or class holding `attr`; a
            trailing `()` means an instance made with no arguments (for
            attributes set in `__init__`).
        attr: str. The attribute (dotted for nested attributes).
        used_in: str. The tfdist_opt module that uses it.
        why: str. Why no public API does, with the upstream issue.
        params: tuple of str, or None. The parameters (with `self`) a
            method must have, checked by `seam.upstream.check()`.
        resolvable: bool. False for an attribute Keras sets only later (in
            `build`, or from constructor arguments): `missing()` skips it,
            and the test `why` names reads it.
    """

    owner: str
    attr: str
    used_in: str
    why: str
    params: tuple[str, ...] | None = None
    resolvable: bool = True
