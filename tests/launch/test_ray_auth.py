"""Ray's auth token: found where Ray reads it, checked before joining."""

import pytest

from tfdist_opt.cluster.ports import LaunchError
from tfdist_opt.launch import ray_auth


def _probe(answers):
    calls = []

    def probe(address, token):
        calls.append(token)
        return answers[token]

    return probe, calls


def test_token_order_is_rays(tmp_path):
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("from-home\n")
    other = tmp_path / "tok"
    other.write_text("from-path")
    home = str(tmp_path)
    assert ray_auth.find_token({"RAY_AUTH_TOKEN": "env"}, home) == ("env", "RAY_AUTH_TOKEN")
    assert ray_auth.find_token({"RAY_AUTH_TOKEN_PATH": str(other)}, home) == (
        "from-path",
        str(other),
    )
    assert ray_auth.find_token({}, home) == ("from-home", str(tmp_path / ".ray" / "auth_token"))
    token, looked = ray_auth.find_token({}, str(tmp_path / "nobody"))
    assert token is None and "RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH" in looked


def test_open_cluster_needs_nothing_and_a_token_cluster_gets_ours(tmp_path):
    probe, calls = _probe({None: "accepted"})
    assert ray_auth.prepare("h:6379", {}, probe) == ({}, "")
    assert calls == [None]
    probe, calls = _probe({None: "refused", "t": "accepted"})
    assert ray_auth.prepare("h:6379", {"RAY_AUTH_TOKEN": "t"}, probe) == (
        {"RAY_AUTH_MODE": "token"},
        "Ray auth token from RAY_AUTH_TOKEN",
    )


def test_missing_or_refused_token_is_named_with_the_fix(tmp_path):
    probe, _ = _probe({None: "refused", "bad": "refused"})
    with pytest.raises(
        LaunchError,
        match=r"requires its auth token, and none was "
        r"found here.*Fix: copy the head's",
    ):
        ray_auth.prepare("h:6379", {}, probe, home=str(tmp_path))
    with pytest.raises(LaunchError, match=r"refused the auth token from RAY_AUTH_TOKEN"):
        ray_auth.prepare("h:6379", {"RAY_AUTH_TOKEN": "bad"}, probe)


def test_no_probe_for_addresses_ray_resolves_or_when_disabled():
    def probe(address, token):
        raise AssertionError("probed")

    for address in ("auto", "ray://h:10001"):
        assert ray_auth.prepare(address, {}, probe) == ({}, "")
    assert ray_auth.prepare("h:6379", {"RAY_AUTH_MODE": "disabled"}, probe) == ({}, "")
