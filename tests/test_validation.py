"""tfdist_opt.validation: the shared checks and their message shape."""

import math

import pytest

from tfdist_opt import validation


@pytest.mark.parametrize(
    "fn,args,match",
    [
        (
            validation.check_choice,
            ("mode", "x", ("a", "b")),
            r"`mode`: expected one of 'a', 'b'. Received: mode='x'",
        ),
        (validation.check_int, ("n", 0, 1), r"`n`: expected a positive int. Received: n=0"),
        (validation.check_int, ("n", -1, 0), r"`n`: expected an int >= 0. Received: n=-1"),
        (validation.check_int, ("n", True, 0), r"Received: n=True"),
        (validation.check_int, ("n", 2.0, 0), r"Received: n=2.0"),
        (
            validation.check_int_or,
            ("p", -1, "autotune", 0),
            r"`p`: expected 'autotune' or an int >= 0. Received: p=-1",
        ),
        (validation.check_number, ("t", 0), r"`t`: expected a positive number. Received: t=0"),
        (validation.check_number, ("t", math.inf), r"Received: t=inf"),
        (
            validation.check_number,
            ("t", -1, True),
            r"`t`: expected a non-negative number. Received: t=-1",
        ),
        (validation.check_bool, ("b", 1), r"`b`: expected a bool. Received: b=1"),
        (
            validation.check_known_keys,
            ({"x": 1, "a": 2}, ("a", "b"), "Thing", "file f"),
            r"Unknown Thing field\(s\) in file f: x. Expected one of: a, b.",
        ),
    ],
)
def test_refusals_name_field_value_and_expectation(fn, args, match):
    with pytest.raises(ValueError, match=match):
        fn(*args)


def test_accepted_values_pass():
    validation.check_choice("m", "a", ("a",))
    validation.check_int("n", 0, 0)
    validation.check_int_or("p", "autotune", "autotune", 0)
    validation.check_number("t", 0, allow_zero=True)
    validation.check_bool("b", False)
    validation.check_known_keys({"a": 1}, ("a",), "Thing", "dict")
