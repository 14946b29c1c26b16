"""Every private TF/Keras name in `tfdist_opt.private_api` still resolves."""

import pytest

from tfdist_opt import private_api


def test_every_private_name_resolves():
    assert private_api.missing() == []


def test_a_missing_name_is_reported_with_its_reason():
    entry = private_api.PrivateName("keras.optimizers.SGD", "_no_such_attr",
                                    "tfdist_opt.x", "because")
    with pytest.raises(AttributeError):
        private_api.resolve(entry)


def test_instance_entries_are_checked_on_an_instance():
    entry = private_api.PrivateName("keras.optimizers.SGD()", "_iterations",
                                    "tfdist_opt.x", "because")
    assert private_api.resolve(entry) is not None
