"""The argument checks: a wrong type is InvalidArgumentType, a bad value InvalidArgument."""

from __future__ import annotations

import math

import pytest

from rideout import _validate as check
from rideout.errors import InvalidArgument, InvalidArgumentType


def test_number() -> None:
    assert check.number("x", 3) == 3.0
    assert isinstance(check.number("x", 3), float)
    assert check.number("x", -0.5) == -0.5
    for wrong in (True, "1", None, [1]):
        with pytest.raises(InvalidArgumentType, match=r"^x must be a number, not "):
            check.number("x", wrong)
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(InvalidArgument, match=r"^x must be finite"):
            check.number("x", bad)
    with pytest.raises(InvalidArgumentType, match="rate must be a rate, not 'fast'"):
        check.number("rate", "fast", what="a rate")


def test_seconds() -> None:
    assert check.seconds("t", 1.5) == 1.5
    assert check.seconds("t", 0, zero_ok=True) == 0.0
    assert check.seconds("t", 2, minimum=2) == 2.0
    with pytest.raises(InvalidArgument, match=r"^t must be > 0, not 0$"):
        check.seconds("t", 0)
    with pytest.raises(InvalidArgument, match=r"^t must be >= 0, not -1$"):
        check.seconds("t", -1, zero_ok=True)
    with pytest.raises(InvalidArgument, match=r"^t must be >= 0.5 seconds, not 0.1$"):
        check.seconds("t", 0.1, minimum=0.5)
    with pytest.raises(InvalidArgumentType, match="a number of seconds"):
        check.seconds("t", "5")


def test_count() -> None:
    assert check.count("n", 0) == 0
    assert check.count("n", 5, low=1, high=5) == 5
    with pytest.raises(InvalidArgument, match=r"^n must be >= 1, not 0$"):
        check.count("n", 0, low=1)
    with pytest.raises(InvalidArgument, match=r"^n must be from 1 to 5, not 6$"):
        check.count("n", 6, low=1, high=5)
    for wrong in (True, 1.0, "1"):
        with pytest.raises(InvalidArgumentType, match=r"^n must be an integer"):
            check.count("n", wrong)


def test_choice() -> None:
    assert check.choice("mode", "sync", ("sync", "async")) == "sync"
    assert check.choice("mode", "b", iter(["a", "b"])) == "b"  # any iterable, read once
    with pytest.raises(InvalidArgument, match=r"^mode must be one of sync, async; got 'x'$"):
        check.choice("mode", "x", ("sync", "async"))
    with pytest.raises(InvalidArgument):
        check.choice("mode", 1, ("sync", "async"))


def test_text() -> None:
    assert check.text("name", "é") == "é"
    with pytest.raises(InvalidArgumentType, match=r"^name must be a non-empty string"):
        check.text("name", b"x")
    with pytest.raises(InvalidArgument, match=r"^name must be a non-empty string"):
        check.text("name", "")
    with pytest.raises(InvalidArgument, match="no lone surrogates"):
        check.text("name", "\ud800")


def test_every_error_is_a_value_error_and_a_wrong_type_also_a_type_error() -> None:
    with pytest.raises(ValueError, match="must be >= 0"):
        check.count("n", -1)
    with pytest.raises(TypeError, match="must be an integer"):
        check.count("n", "1")
    with pytest.raises(ValueError, match="must be an integer"):
        check.count("n", "1")


@pytest.mark.parametrize(
    "url", ["https://api.example", "https://10.0.0.1:6443/x", "http://127.0.0.1:5000",
            "http://127.9.9.9", "http://localhost:4566", "http://[::1]:80"],
)  # fmt: skip
def test_secure_url_accepts_https_and_loopback_http(url: str) -> None:
    assert check.secure_url("endpoint", url) == url


@pytest.mark.parametrize(
    "url", ["http://10.0.0.5:4566", "http://example.com", "ftp://127.0.0.1", "https://", "x"]
)
def test_secure_url_refuses_clear_text_off_the_machine(url: str) -> None:
    with pytest.raises(InvalidArgument, match=r"^endpoint must be an https:// URL"):
        check.secure_url("endpoint", url)
