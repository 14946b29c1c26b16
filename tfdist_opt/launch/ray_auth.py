"""Ray's auth token for `launch --ray ADDRESS`: found where Ray looks, checked first.

Ray 2.60 clusters started with `RAY_AUTH_MODE=token` refuse every driver
and node that does not present the cluster's token. A driver presents one
only when its own `RAY_AUTH_MODE` is `token`, and without it `ray.init`
retries for about 20 s before failing. So before joining, the launcher asks
the cluster's GCS once, with a short deadline (one gRPC call,
`NodeInfoGcsService/GetClusterId`, the call Ray's own client starts with):

- the cluster answers without a token: nothing to do;
- it refuses (UNAUTHENTICATED) and a token is found where Ray reads one —
  `RAY_AUTH_TOKEN`, else the file named by `RAY_AUTH_TOKEN_PATH`, else
  `~/.ray/auth_token` — and the cluster accepts it: the launcher sets
  `RAY_AUTH_MODE=token` for its own process, so Ray sends that token, and
  the start line names its source;
- it refuses and there is no token, or it refuses the one found: a
  `LaunchError` within seconds, with the fix.

Other answers (unreachable, a slow head) are left to `ray.init`, which
reports them itself.
"""

from __future__ import annotations

import os
import re
from typing import Callable, Mapping

from tfdist_opt.cluster.ports import LaunchError

MODE_ENV = "RAY_AUTH_MODE"
TOKEN_ENV = "RAY_AUTH_TOKEN"
TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"
PROBE_TIMEOUT_S = 3.0
_METHOD = "/ray.rpc.NodeInfoGcsService/GetClusterId"
_ACCEPTED, _REFUSED, _OTHER = "accepted", "refused", "other"


def find_token(environ: Mapping[str, str], home: str | None = None) -> tuple[str | None, str]:
    """(token, where it came from) in Ray's order; (None, places looked)."""
    if environ.get(TOKEN_ENV, "").strip():
        return environ[TOKEN_ENV].strip(), TOKEN_ENV
    path = environ.get(TOKEN_PATH_ENV)
    if not path:
        path = os.path.join(home or os.path.expanduser("~"), ".ray", "auth_token")
    try:
        with open(path) as f:
            token = f.read().strip()
    except OSError:
        token = ""
    if token:
        return token, path
    return None, f"{TOKEN_ENV}, {TOKEN_PATH_ENV}, {path}"


def grpc_probe(address: str, token: str | None, timeout: float = PROBE_TIMEOUT_S) -> str:
    """One GetClusterId call: "accepted", "refused" (auth) or "other"."""
    try:
        import grpc  # pylint: disable=g-import-not-at-top  (comes with Ray)
    except ImportError:
        return _OTHER  # no Ray here either: run_ray says so next
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_unary(
            _METHOD, request_serializer=lambda b: b, response_deserializer=lambda b: b
        )
        try:
            call(
                b"",
                timeout=timeout,
                metadata=[("authorization", f"Bearer {token}")] if token else None,
            )
            return _ACCEPTED
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.UNAUTHENTICATED:
                return _REFUSED
            return _OTHER


def prepare(
    address: str,
    environ: Mapping[str, str] | None = None,
    probe: Callable[[str, str | None], str] = grpc_probe,
    home: str | None = None,
) -> tuple[dict[str, str], str]:
    """(variables to set in this process, start-line note) for joining `address`.

    Raises:
        LaunchError: the cluster wants a token and none here is accepted.
    """
    environ = os.environ if environ is None else environ
    if environ.get(MODE_ENV, "").lower() == "disabled" or not re.fullmatch(r"[\w.-]+:\d+", address):
        return {}, ""  # ray://, auto: Ray resolves and reports those itself
    if probe(address, None) != _REFUSED:
        return {}, ""
    token, source = find_token(environ, home)
    fix = (
        "Fix: copy the head's ~/.ray/auth_token (written by `ray start` with "
        f"{MODE_ENV}=token) to this host's ~/.ray/auth_token, or set "
        f"{TOKEN_ENV} / {TOKEN_PATH_ENV}, then run again."
    )
    if token is None:
        raise LaunchError(
            f"Cannot join the Ray cluster at `--ray {address}`: it requires its "
            f"auth token, and none was found here (looked in {source}). {fix}"
        )
    if probe(address, token) != _ACCEPTED:
        raise LaunchError(
            f"Cannot join the Ray cluster at `--ray {address}`: it refused the "
            f"auth token from {source} (another cluster's token?). {fix}"
        )
    updates = {} if environ.get(MODE_ENV, "").lower() == "token" else {MODE_ENV: "token"}
    return updates, f"Ray auth token from {source}"
