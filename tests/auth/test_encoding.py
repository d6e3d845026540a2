"""Strict base64url and JSON: one spelling per value, nothing a parser could disagree on."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rideout.auth._encoding import b64url_decode, b64url_encode, strict_json_object


@given(st.binary(max_size=200))
def test_base64url_round_trips_without_padding(data: bytes) -> None:
    text = b64url_encode(data)
    assert not set(text) & set("=+/")
    assert b64url_decode(text) == data


def test_base64url_known_values() -> None:
    assert b64url_encode(b"") == ""
    assert b64url_encode(b"\xfb\xff") == "-_8"
    assert b64url_decode("-_8") == b"\xfb\xff"


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("-_8=", "not unpadded base64url"),  # padding
        ("+/8", "not unpadded base64url"),  # the other alphabet
        ("a b", "not unpadded base64url"),
        ("abcde", "not unpadded base64url"),  # a length no encoding has
        ("-_9", "non-canonical base64url"),  # same bytes as "-_8", other trailing bits
    ],
)
def test_base64url_refuses_every_other_spelling(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        b64url_decode(text)


def test_strict_json_accepts_an_object_from_text_or_bytes() -> None:
    assert strict_json_object('{"a": 1, "b": [true, null]}') == {"a": 1, "b": [True, None]}
    assert strict_json_object(b'{"a": "\\u00e9"}') == {"a": "é"}


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        ('{"a": 1, "a": 2}', "duplicate key 'a'"),
        ('{"x": {"a": 1, "a": 1}}', "duplicate key"),
        ('{"a": NaN}', "NaN is not a JSON number"),
        ('{"a": -Infinity}', "-Infinity is not a JSON number"),
        ("[1]", "not a JSON object"),
        ('"text"', "not a JSON object"),
        ("[" * 100_000 + "]" * 100_000, "JSON nested too deeply"),
        ("{", "Expecting"),
    ],
)
def test_strict_json_refuses(document: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        strict_json_object(document)


def test_strict_json_refuses_bytes_that_are_not_utf8() -> None:
    with pytest.raises(UnicodeDecodeError):  # a ValueError, as the docstring promises
        strict_json_object(b'{"a": "\xff"}')
