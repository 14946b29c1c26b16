"""Every private TF/Keras name in `tfdist_opt.private_api` still resolves."""

import pytest

from tfdist_opt import private_api


@pytest.mark.compat
def test_every_private_name_resolves():
    assert private_api.missing() == []


def test_a_missing_name_is_reported_with_its_reason(monkeypatch):
    gone = private_api.PrivateName("keras.optimizers.SGD", "_no_such_attr",
                                   "tfdist_opt.x", "because upstream#1 has no hook")
    no_module = private_api.PrivateName("keras.no_such_module.Thing", "attr",
                                        "tfdist_opt.y", "why not")
    with pytest.raises(AttributeError):
        private_api.resolve(gone)
    monkeypatch.setattr(private_api, "ENTRIES",
                        private_api.ENTRIES + (gone, no_module))
    reported = private_api.missing()
    assert len(reported) == 2, reported
    assert reported[0].startswith(
        "keras.optimizers.SGD._no_such_attr (used in tfdist_opt.x: because "
        "upstream#1 has no hook): AttributeError: "), reported[0]
    assert "_no_such_attr" in reported[0].split("AttributeError: ", 1)[1]
    assert reported[1].startswith(
        "keras.no_such_module.Thing.attr (used in tfdist_opt.y: why not): "), reported[1]


@pytest.mark.compat
def test_instance_entries_are_checked_on_an_instance():
    entry = private_api.PrivateName("keras.optimizers.SGD()", "_iterations",
                                    "tfdist_opt.x", "because")
    assert private_api.resolve(entry) is not None
